"""make_tree: a small repository of files written under a temporary root, for the
tests of the documentation checks."""
import os


def make_tree(root, files):
    """Writes {relative path: text} under root."""
    for path, text in files.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)
