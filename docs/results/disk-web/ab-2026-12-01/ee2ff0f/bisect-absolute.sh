#!/bin/bash
# git bisect run step: build the checked-out commit, two disk-web trials at 16 clients.
cd /tmp/wt-292 || exit 125
c=$(git rev-parse --short HEAD)
CARGO_TARGET_DIR=/tmp/wt-292/target cargo build --release -q -p duality >/tmp/res51/dw/build-$c.log 2>&1 || exit 125
cp /tmp/wt-292/target/release/duality /tmp/dbin-bis || exit 125
vals=""
for i in 1 2 3; do
  v=$(/tmp/res51/dwpoint.sh /tmp/dbin-bis $c-$i | awk '{print $2}')
  vals="$vals $v"
  m=$(echo $vals | tr ' ' '\n' | sort -n | head -1)
  if [ $i -ge 2 ]; then
    if python3 -c "import sys; sys.exit(0 if $m >= 66 else 1)"; then echo "$c bad $vals" >> /tmp/res51/bisect.log; exit 1; fi
    if python3 -c "import sys; sys.exit(0 if $m <= 64 else 1)"; then echo "$c good $vals" >> /tmp/res51/bisect.log; exit 0; fi
  fi
done
# undecided after three: the min decides
if python3 -c "import sys; sys.exit(0 if $m >= 65 else 1)"; then echo "$c bad? $vals" >> /tmp/res51/bisect.log; exit 1; fi
echo "$c good? $vals" >> /tmp/res51/bisect.log; exit 0
