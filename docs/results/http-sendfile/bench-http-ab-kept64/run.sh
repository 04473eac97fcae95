#!/bin/bash
# `duality bench http` (its own client) at 32 and 48 KiB: 734825f (sendfile
# from 32 KiB, 16-32 KiB learned) against the same code with --sendfile-kept
# defaulting to 64 KiB (16-64 KiB learned), /tmp/dbin-kept64; nginx (one
# worker) in each run; builds taking turns, twice.
for i in 1 2; do
  for b in 734825f kept64; do
    /tmp/dbin-$b bench http --io uring --sizes 32768,49152 --clients 100,1000 \
      --servers duality-knot-c,nginx-1w --out /tmp/res60/bh3-$b-$i
  done
done
