#!/usr/bin/env python3
# Locked instructions per operation of one thread, from callgrind: every lock-prefixed
# instruction, xchg with a memory operand (implicitly locked) and mfence of BINARY, with how
# often it ran per operation ((count in the 2N run - count in the N run) / N).
#   scripts/callgrind-locked.py BINARY CG_N CG_2N N
# CG_N, CG_2N: one thread's files of runs with N and 2N operations made with
#   valgrind --tool=callgrind --fair-sched=yes --separate-threads=yes --dump-instr=yes \
#       --callgrind-out-file=cg.N dmaguard bench workloads --case fwd64/strict --ops N
# (thread -04 is the driver). BINARY is the dmaguard executable of the run (its object in the
# files is found by name), or a shared library with OB=<callgrind object number> set
# (e.g. libc: OB=3 scripts/callgrind-locked.py /lib/x86_64-linux-gnu/libc.so.6 ...).
# A release build with -Ddebug=true gives source lines.
import glob
import os
import re
import subprocess
import sys

binp, f1, f2, n = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
dis = subprocess.run(["objdump", "-d", "-l", "--no-show-raw-insn", binp],
                     capture_output=True, text=True, check=True).stdout
locked = {}
fn = src = None
for line in dis.splitlines():
    m = re.match(r'^[0-9a-f]+ <(.*)>:$', line)
    if m:
        fn = m.group(1)
        continue
    m = re.match(r'^(/\S+:\d+)', line)
    if m:
        src = re.sub(r'^.*/\.\./', '', m.group(1))
        continue
    m = re.match(r'^\s+([0-9a-f]+):\s+(.*)$', line)
    if not m:
        continue
    ins = m.group(2).strip()
    if (re.match(r'lock\b', ins) or (re.match(r'xchg\s', ins) and '(' in ins)
            or ins.startswith('mfence')):
        locked[int(m.group(1), 16)] = (fn, src, ins)

# The object number of BINARY: names are compressed across a run's thread files.
main_ob = os.environ.get("OB")
if not main_ob:
    base = os.path.basename(binp)
    for g in glob.glob(f1.rsplit('-', 1)[0] + '-*'):
        for line in open(g):
            m = re.match(r'c?ob=\((\d+)\) (.*)$', line.strip())
            if m and os.path.basename(m.group(2)) == base:
                main_ob = m.group(1)


def load(f):
    cnt = {}
    inmain = False
    last = 0
    skip = False
    for line in open(f):
        if line.startswith('ob='):
            m = re.match(r'ob=\((\d+)\)', line)
            inmain = bool(m) and m.group(1) == main_ob
            continue
        if line.startswith('calls='):
            skip = True  # the next cost line is the call's inclusive cost
            continue
        m = re.match(r'^(0x[0-9a-f]+|[+-]\d+|\*)\s+\S+\s+(\d+)', line)
        if not m:
            continue
        a = m.group(1)
        if a.startswith('0x'):
            last = int(a, 16)
        elif a != '*':
            last += int(a)
        if skip:
            skip = False
            continue
        if inmain:
            cnt[last] = cnt.get(last, 0) + int(m.group(2))
    return cnt


c1, c2 = load(f1), load(f2)
tot = 0
print('  per op   count(2N)  address  function  source  instruction')
for a in sorted(locked):
    if c2.get(a, 0):
        d = (c2.get(a, 0) - c1.get(a, 0)) / n
        f, s, ins = locked[a]
        print(f'{d:8.4f} {c2[a]:9d} {a:#x} {f} {s} {ins}')
        tot += d
print(f'{tot:8.4f} per op in total')
