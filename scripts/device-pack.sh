#!/usr/bin/env bash
# Packs a release build of `duality` for the lent device machine (see
# scripts/device-scaling.sh) into .dev/, a folder git ignores: the stripped
# binary, the shared libraries it needs beyond the C library (that machine
# has no fontconfig or freetype), and DejaVu fonts with a fonts.conf for the
# plots. Carry `.dev` in the device call; scripts/device-scaling.sh sets
# the library and font paths itself when it finds .dev/lib beside the binary.
#
# Usage, from the repository root: scripts/device-pack.sh [BINARY]
# (default target/release/duality; build it with `cargo build --release`).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/duality}
[ -x "$bin" ] || { echo "no binary at $bin: cargo build --release" >&2; exit 1; }
grep -qx '/.dev/' .git/info/exclude 2>/dev/null || echo '/.dev/' >>.git/info/exclude
rm -rf .dev
mkdir -p .dev/lib .dev/fonts
cp "$bin" .dev/duality
strip .dev/duality
for lib in $(ldd .dev/duality | awk '/=>/ { print $3 }'); do
    case $(basename "$lib") in
        libc.so* | libm.so* | libgcc_s.so* | ld-linux*) ;;
        *) cp -L "$lib" .dev/lib/ ;;
    esac
done
fonts=$(fc-list --format '%{file}\n' 2>/dev/null | grep -i '/DejaVuSans[^/]*\.ttf$' | head -20)
[ -n "$fonts" ] || fonts=$(ls /usr/share/fonts/truetype/dejavu/DejaVuSans*.ttf 2>/dev/null || true)
[ -n "$fonts" ] || { echo "no DejaVu fonts found (apt-get install fonts-dejavu-core)" >&2; exit 1; }
for f in $fonts; do cp "$f" .dev/fonts/; done
# memcached and nginx, the peers, where this machine has them (the device
# has neither and cannot fetch them): the binaries in .dev/bin, their
# libraries beside the others.
for peer in memcached nginx; do
    p=$(command -v $peer || ls /usr/sbin/$peer 2>/dev/null) || continue
    mkdir -p .dev/bin
    cp -L "$p" .dev/bin/$peer
    for lib in $(ldd "$p" | awk '/=>/ { print $3 }'); do
        case $(basename "$lib") in
            libc.so* | libm.so* | libgcc_s.so* | ld-linux*) ;;
            *) [ -e ".dev/lib/$(basename "$lib")" ] || cp -L "$lib" .dev/lib/ ;;
        esac
    done
done
cat >.dev/fonts.conf <<'XML'
<?xml version="1.0"?>
<!DOCTYPE fontconfig SYSTEM "fonts.dtd">
<fontconfig>
  <dir prefix="relative">fonts</dir>
  <cachedir>/tmp/duality-fontconfig</cachedir>
</fontconfig>
XML
# A device call carries the tracked files and .dev within 64 MiB.
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
packed=$(du -sb .dev | cut -f1)
if [ $((tracked + packed)) -gt $((64 << 20)) ]; then
    echo "tracked files ($((tracked >> 20)) MiB) and .dev ($((packed >> 20)) MiB) exceed a device call's 64 MiB: see scripts/device-scaling.sh for leaving docs/results out" >&2
fi
echo "packed: $(du -sh .dev | cut -f1) in .dev ($(ls .dev/lib | wc -l) libraries, $(ls .dev/fonts | wc -l) fonts$(ls .dev/bin 2>/dev/null | sed 's/^/, /' | tr -d '\n'))"
