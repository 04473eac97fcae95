#!/bin/bash
# dwpoint.sh BIN LABEL: one disk-web trial of duality at 16 clients; prints req/s and CPU us/request
B=$1; L=$2
$B bench disk --web --dir /work/webdisk --web-servers duality --web-clients 16 --seconds 3 --out /tmp/p52/dw/$L > /dev/null 2>/tmp/p52/dw/$L.err
grep "^| 16 " /tmp/p52/dw/$L/disk-web.md | awk -F'|' '{print $4, $9}'
