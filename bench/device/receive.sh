#!/usr/bin/env bash
# On the GPU host, once per carried part (bench/device/parts.sh): keep part K under /tmp/fl; after the last one,
# check the whole (md5) and unpack the bundle into /tmp/fl/bundle.
set -euo pipefail
K=$1; D=/tmp/fl
mkdir -p $D/parts
cp .devparts/c$K/part.* $D/parts/
[ -f .devparts/c$K/PARTS ] && cp .devparts/c$K/PARTS $D/PARTS
read -r n md5 < $D/PARTS
have=$(ls $D/parts | wc -l)
echo "part $K: $have of $n here"
if [ "$have" = "$n" ]; then
  [ "$(cat $D/parts/part.* | md5sum | cut -c1-32)" = "$md5" ] || { echo "bundle checksum mismatch"; exit 1; }
  rm -rf $D/bundle && mkdir -p $D/bundle && cat $D/parts/part.* | tar xf - -C $D/bundle && rm -rf $D/parts
  du -sh $D/bundle; echo "bundle unpacked in $D/bundle"
fi
