#!/usr/bin/env python3
"""RSS of a process split by mapping, from /proc/PID/smaps.

Usage: smaps.py PID [BINARY]

Prints one `rss_<part>_kb N` line per part, then the total:
  binary_text     the executable's code pages (r-x mappings of BINARY)
  binary_rodata   its read-only data (r-- mappings of BINARY)
  binary_data     its .data/.bss (rw- mappings of BINARY, and the anonymous
                  mapping right after them that holds the rest of .bss)
  heap            [heap] (brk)
  thread_stacks   anonymous rw mappings of 64 KB or more directly above a
                  PROT_NONE guard, which is how musl and glibc lay out a
                  thread's stack, and the main thread's [stack]
  anon_other      every other anonymous mapping (malloc's mmapped chunks,
                  gRPC's arenas, ...)
  file_other      other file-backed mappings (none for a static binary)
BINARY defaults to the process's /proc/PID/exe.
"""

import os
import re
import sys

# A thread stack sits right above its PROT_NONE guard. musl's malloc also
# puts guard pages between its small groups: those are a few pages, while the
# smallest thread stack is musl's default of 128 KB (Rust's threads: 2 MiB).
STACK_MIN = 64 * 1024

HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s*(.*)$")


def mappings(pid):
    """Yields (start, end, perms, path, rss_kb) per mapping."""
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            m = HEADER.match(line)
            if m:
                if cur:
                    yield cur
                cur = [int(m[1], 16), int(m[2], 16), m[3], m[4].strip(), 0]
            elif line.startswith("Rss:") and cur:
                cur[4] = int(line.split()[1])
    if cur:
        yield cur


def split(pid, binary):
    parts = dict.fromkeys(
        ["binary_text", "binary_rodata", "binary_data", "heap", "thread_stacks",
         "anon_other", "file_other"], 0)
    prev = None
    for start, end, perms, path, rss in mappings(pid):
        if path == binary:
            part = {"r-x": "binary_text", "r--": "binary_rodata"}.get(perms[:3], "binary_data")
        elif path == "[heap]":
            part = "heap"
        elif path == "[stack]":
            part = "thread_stacks"
        elif path.startswith("["):  # [vdso], [vvar], [vsyscall]
            part = None
        elif path:
            part = "file_other"
        elif (prev and prev[1] == start and prev[2].startswith("---") and not prev[3]
              and end - start >= STACK_MIN):
            part = "thread_stacks"
        elif prev and prev[1] == start and prev[3] == binary and perms.startswith("rw"):
            part = "binary_data"
        else:
            part = "anon_other"
        if part:
            parts[part] += rss
        prev = (start, end, perms, path)
    return parts


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: smaps.py PID [BINARY]")
    pid = sys.argv[1]
    binary = sys.argv[2] if len(sys.argv) > 2 else os.readlink(f"/proc/{pid}/exe")
    parts = split(pid, os.path.realpath(binary))
    for name, kb in parts.items():
        print(f"rss_{name}_kb {kb}")
    print(f"rss_total_kb {sum(parts.values())}")


if __name__ == "__main__":
    main()
