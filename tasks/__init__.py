"""Real tasks built on structopt (installed as ``structopt.tasks``)."""
