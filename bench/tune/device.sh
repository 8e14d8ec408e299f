#!/usr/bin/env bash
# bench/tune/device.sh: the device run of issue 4 (worker e2e test + tuning
# benchmark), from the repository root. Carry
# [".device", "build-deps"]. The carried .device debs lack libsystemd0 (the
# runtime library behind libsystemd-dev's libsystemd.so symlink): use this
# host's copy. Debug build: other modules do not build at -O3 with -Werror
# (fleet_record.c, cli_fleet.c); kernels are NVRTC-compiled either way.
source .device/setup.sh
[ -d build-deps/lib ] && cp -a build-deps/lib/libsystemd.so* /opt/deps/usr/lib/x86_64-linux-gnu/
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH
(cmake -S . -B build-gpu2 -G Ninja -DCMAKE_BUILD_TYPE=Debug -DTT_FAULT_INJECTION=ON &&
 ninja -C build-gpu2 tiletuned tiletune_worker tiletune_cli tt_lookup_bench test_tune_gpu test_worker_unit) >$OUT/build.log 2>&1
tail -1 $OUT/build.log
TT_TEST_TIMEOUT=75 timeout 80 build-gpu2/tests/worker/test_tune_gpu 2>&1 | tail -12
for d in /tmp/ttd-*; do [ -d $d ] && mkdir -p $OUT/$(basename $d) && cp $d/*.log $OUT/$(basename $d)/ 2>/dev/null; done
timeout 330 bench/tune/run.sh build-gpu2 $OUT/grid default "fast exhaustive" ${CAP:-140} 2>&1 | tail -45
