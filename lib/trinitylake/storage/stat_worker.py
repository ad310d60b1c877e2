"""Child process of `trinitylake.storage.background_sizes`: ``stat`` relative keys under one folder.

Run as a file (``python -I stat_worker.py ROOT``), never imported: it needs nothing but the
standard library, so it starts in milliseconds. Reads keys, one per line, from stdin; at end of
input writes one little-endian int64 per key to stdout: the size, -1 for a missing file, -2 for
any other error (the parent asks its storage again, with retries and typed errors).
"""

import array
import os
import sys


def main() -> int:
    dfd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
    out = array.array("q")
    stat = os.stat
    for line in sys.stdin.buffer:
        try:
            out.append(stat(line[:-1], dir_fd=dfd).st_size)
        except FileNotFoundError:
            out.append(-1)
        except OSError:
            out.append(-2)
    if sys.byteorder != "little":
        out.byteswap()
    sys.stdout.buffer.write(out.tobytes())
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
