"""A training script that prints, writes to stderr, warns, lets a thread die and then fails:
everything a user's script puts in a role's log besides log records."""

import sys
import threading
import warnings

print("hello from the script")
print("two\nlines", flush=True)
sys.stderr.write("a line on stderr\n")
warnings.warn("the learning rate looks high", UserWarning, stacklevel=1)
worker = threading.Thread(target=lambda: 1 / 0, name="loader")
worker.start()
worker.join()
print("last words, no newline", end="")
raise ValueError("bad row 7")
