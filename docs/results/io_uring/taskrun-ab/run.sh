#!/bin/bash
# What ran: the release build of 60fd68b as $B (/tmp/dbin-60fd68b), nothing else running. The
# ring's task-work mode taking turns, one round per run, three runs each:
# `coop` = DUALITY_URING_COOP=1 (COOP_TASKRUN, the earlier default),
# `defer` = the default (DEFER_TASKRUN + SINGLE_ISSUER). Then summarize.py.
B=${B:?the duality binary}
O=${O:-$(dirname "$0")}
for r in 1 2 3; do
  DUALITY_URING_COOP=1 "$B" bench models --models sped,symped:2 --io epoll,uring --clients 8,40,120 --rounds 1 --windows 3 --no-peers --out "$O/unix/coop-$r"
  "$B" bench models --models sped,symped:2 --io epoll,uring --clients 8,40,120 --rounds 1 --windows 3 --no-peers --out "$O/unix/defer-$r"
done
for r in 1 2 3; do
  DUALITY_URING_COOP=1 "$B" bench models --models sped,symped:1,symped:2 --clients 8,40,120 --rounds 1 --windows 3 --tcp --out "$O/tcp/coop-$r"
  "$B" bench models --models sped,symped:1,symped:2 --clients 8,40,120 --rounds 1 --windows 3 --tcp --out "$O/tcp/defer-$r"
done
# The case deferred task work once stalled (04d94ff: pipelined gets, 120 connections).
for r in 1 2; do
  DUALITY_URING_COOP=1 "$B" bench models --models sped,symped:2 --clients 120 --pipeline 32 --rounds 1 --windows 3 --no-peers --out "$O/pipeline32/coop-$r"
  "$B" bench models --models sped,symped:2 --clients 120 --pipeline 32 --rounds 1 --windows 3 --no-peers --out "$O/pipeline32/defer-$r"
done
python3 "$O/summarize.py" "$O" > "$O/summary.md"
