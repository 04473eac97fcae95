#!/bin/bash
out=$1; shift; rounds=$1; shift
mkdir -p $out
for r in $(seq 1 $rounds); do for b in "$@"; do
  n=$(basename $b)
  $b bench http --io uring --sizes 1024,16384 --clients 100,1000 --servers duality-knot-c --seconds 3 --repeat 1 --out $out/$n-$r > /dev/null 2>&1
  python3 - "$out/$n-$r" "$n" "$r" <<'PY'
import json,sys,glob
d=sys.argv[1]; j=json.load(open(glob.glob(d+'/*.json')[0]))
rows=[]
def walk(x):
    if isinstance(x,dict):
        if 'requests_per_sec' in x or 'rps' in x: rows.append(x)
        for v in x.values(): walk(v)
    elif isinstance(x,list):
        for v in x: walk(v)
walk(j)
print(sys.argv[2], sys.argv[3], [(r.get('file'), r.get('clients'), round(r.get('requests_per_sec', r.get('rps',0))), r.get('cpu_us_per_request')) for r in rows])
PY
done; done
