#!/bin/bash
# git bisect run step: the checked-out commit against 292c960's build, taking turns, disk-web at 16 clients.
cd /tmp/wt-292 || exit 125
c=$(git rev-parse --short HEAD)
CARGO_TARGET_DIR=/tmp/wt-292/target cargo build --release -q -p duality >/tmp/res51/dw/build-$c.log 2>&1 || exit 125
cp /tmp/wt-292/target/release/duality /tmp/dbin-bis || exit 125
cs=""; os=""
for i in 1 2 3; do
  cs="$cs $(/tmp/res51/dwpoint.sh /tmp/dbin-bis b2-$c-$i | awk '{print $2}')"
  os="$os $(/tmp/res51/dwpoint.sh /tmp/dbin-292c b2o-$c-$i | awk '{print $2}')"
  r=$(python3 -c "import statistics as s; c=[float(x) for x in '$cs'.split()]; o=[float(x) for x in '$os'.split()]; print(round(s.median(c)/s.median(o),3))")
  if [ $i -ge 2 ]; then
    if python3 -c "import sys; sys.exit(0 if $r >= 1.12 else 1)"; then echo "$c bad $r c:$cs o:$os" >> /tmp/res51/bisect2.log; exit 1; fi
    if python3 -c "import sys; sys.exit(0 if $r <= 1.05 else 1)"; then echo "$c good $r c:$cs o:$os" >> /tmp/res51/bisect2.log; exit 0; fi
  fi
done
if python3 -c "import sys; sys.exit(0 if $r >= 1.09 else 1)"; then echo "$c bad? $r c:$cs o:$os" >> /tmp/res51/bisect2.log; exit 1; fi
echo "$c good? $r c:$cs o:$os" >> /tmp/res51/bisect2.log; exit 0
