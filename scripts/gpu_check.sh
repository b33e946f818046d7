#!/bin/sh
# One command for the first GPU machine (issue 26): builds bf with CUDA and
# checks the device end to end, in under 8 minutes on an H200.
#
#   sh scripts/gpu_check.sh [--dry-run] [--out DIR] [--debs DIR] [--build DIR]
#
# Parts, each with a time limit, logged to DIR/logs/PART.log:
#   deps      unpack the carried Debian packages (--debs, default .gpu_debs;
#             fetched here by `sh scripts/gpu_check.sh --fetch-debs`) into
#             DIR/sysroot with dpkg -x and point the compiler, linker,
#             pkg-config and CMake at it: the GPU machine reaches no registry
#   build     configure (CUDA on) and build
#   parity    test_cuda_parity --verbose: must pass with Tested > 0
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck on the scan,
#             LSTM, conv1d and halting parity cases
#   torch     test_it_parity_torch with every dump made on the GPU
#             (BF_PARITY_DEVICE=cuda, vit_avit and encoder_bimamba among
#             them) against the PyTorch reference (BF_PYTHON: python3)
#   bench_*   bench_ops, bench_train, bench_mixers, bench_vit, bench_bf16 --device cuda
#             --json (DIR/logs/bench_NAME.json)
#   sweep     a 2-trial sweep through bfd with device: cuda
# and DIR/summary.json: pass / fail / skip per part, seconds, and the MFU of
# bench_train at the GPT-2-124M shape (its JSON's mfu, when it reports one).
# DIR (default $OUT, else ./gpu_check_out) ends with 3 files: summary.json,
# gpu_check.log and logs.tar.gz (the device tool returns at most 8).
#
# --dry-run runs everything but the GPU steps (build with nvcc when there is
# one, test_cuda_parity must then report itself skipped, the dumps and
# benches on the CPU with tiny step counts, the sweep on the CPU): ctest's
# test_gpu_check_dry runs it on every machine.
set -u
cd "$(dirname "$0")/.."
root=$(pwd)

dry=0 out=${OUT:-} debs=$root/.gpu_debs build= fetch=0 runpart=
while [ $# -gt 0 ]; do
    case $1 in
    --dry-run) dry=1 ;;
    --out) out=$2; shift ;;
    --debs) debs=$2; shift ;;
    --build) build=$2; shift ;;
    --fetch-debs) fetch=1 ;;
    --run-part) runpart=$2; shift ;;
    *) echo "gpu_check: unknown argument '$1' (valid: --dry-run, --out DIR, --debs DIR," \
        "--build DIR, --fetch-debs)" >&2; exit 2 ;;
    esac
    shift
done

# The libraries bf builds against that a CUDA image may lack (their -dev
# packages and what those need at run time); CUDA and NCCL are there.
DEBS="libopenblas-dev libopenblas0 libopenblas0-pthread libzmq3-dev libzmq5 libsodium23
libpgm-5.3-0 libnorm1 libyaml-dev libyaml-0-2 libjansson-dev libjansson4 libsqlite3-dev
libsqlite3-0 libcriterion-dev libcriterion3 libnanomsg5 libgit2-1.5 libmicrohttpd-dev
libmicrohttpd12 libcairo2-dev libcairo2 libpixman-1-0 libfontconfig1 libfreetype6 libpng16-16
libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libhwloc15 libevent-core-2.1-7
libevent-pthreads-2.1-7 libpmix2 libfabric1 libucx0 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1"

# ---- the parts that are this script's own functions: part() runs each as
# `sh gpu_check.sh --run-part NAME` under timeout(1), which kills its
# children too; their settings come through GC_* variables ----
deps() {
    n=0
    for f in "$debs"/*.deb; do
        [ -e "$f" ] || continue
        dpkg -x "$f" "$sysroot" || return 1
        n=$((n + 1))
    done
    echo "$n packages unpacked into $sysroot"
    # their .pc files name /usr: point them at the sysroot
    for pc in "$sysroot"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$sysroot"/usr/share/pkgconfig/*.pc; do
        [ -e "$pc" ] && sed -i "s|=/usr|=$sysroot/usr|g" "$pc"
    done
    return 0
}

configure() {
    cuda=ON
    [ $have_nvcc = 1 ] || cuda=OFF
    # a build folder given that is configured already is only brought up to date
    if [ ! -f "$build/CMakeCache.txt" ]; then
        cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DBF_CUDA=$cuda \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DMPI_C_COMPILER="$mpicc" || return 1
    fi
    cmake --build "$build" -j"$(nproc)"
}

# Tested > 0 and no failure: a run that skipped is a failure here
parity() {
    "$bin/test_cuda_parity" --verbose --jobs 1
    rc=$?
    [ $rc = 0 ] || return $rc
    grep -q "Tested: [1-9]" "$logs/parity.log" || { echo "gpu_check: Tested 0"; return 1; }
}

sanitize() {
    status=0
    for tool in memcheck racecheck synccheck; do
        for f in 'cuda_parity/scan*' 'cuda_parity/lstm*' 'cuda_parity/conv1d' \
            'cuda_parity/halt*'; do
            echo "== $tool $f"
            compute-sanitizer --tool $tool --error-exitcode 9 \
                "$bin/test_cuda_parity" --filter "$f" --jobs 1 || status=1
        done
    done
    return $status
}

sweep() {
    home=$out/bfhome
    rm -rf "$home"
    mkdir -p "$home"
    export BF_HOME=$home
    cat >"$home/sweep.yaml" <<EOF
name: gpu-check
pipeline: budgetformer
device: $dev
base:
  data: {train: $root/tests/data/glosses_train.tsv, val: $root/tests/data/glosses_val.tsv}
  model: {layers: 2, d_model: 32, heads: 4, seq_len: 24, vocab: 300}
  train: {steps: 40, batch: 8, lr: 2.0e-3, eval_every: 20, checkpoint_every: 0, log_every: 10, seed: 1}
sweep:
  method: grid
  parameters:
    budget.enabled: {values: [true, false]}
metric: {name: val/acc, goal: max}
resources: {ranks: 1, cpus_per_rank: 1}
retries: 0
EOF
    "$bin/bfctl" validate "$home/sweep.yaml" || return 1
    "$bin/bfd" --daemonize || return 1
    i=0
    until BF_TIMEOUT=1 "$bin/bfctl" daemon status >/dev/null 2>&1; do
        i=$((i + 1))
        [ $i -gt 100 ] && { tail -n 20 "$home/bfd.log"; return 1; }
        sleep 0.1
    done
    job=$("$bin/bfctl" submit "$home/sweep.yaml") || return 1
    status=0
    "$bin/bfctl" wait "$job" || status=1
    "$bin/bfctl" results "$job" || status=1
    pid=$(cat "$home/bfd.lock" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
    return $status
}

if [ -n "$runpart" ]; then
    sysroot=$GC_SYSROOT debs=$GC_DEBS build=$GC_BUILD bin=$GC_BUILD logs=$GC_LOGS dev=$GC_DEV
    out=$GC_OUT have_nvcc=$GC_NVCC mpicc=$GC_MPICC
    case $runpart in
    deps | configure | parity | sanitize | sweep) "$runpart"; exit $? ;;
    *) echo "gpu_check: no part $runpart" >&2; exit 2 ;;
    esac
fi

if [ $fetch = 1 ]; then
    # here, with a registry: the .deb files the GPU machine gets as carried files
    mkdir -p "$debs" && cd "$debs" || exit 1
    status=0
    for p in $DEBS; do apt-get download "$p" >/dev/null 2>&1 || { echo "gpu_check: no package $p" >&2; status=1; }; done
    du -sh "$debs" >&2
    exit $status
fi

if [ -z "$out" ]; then out=$root/gpu_check_out; fi
mkdir -p "$out/logs" || exit 1
out=$(cd "$out" && pwd)
logs=$out/logs
[ -n "$build" ] || build=$root/build-gpu
log=$out/gpu_check.log
: >"$log"
parts=$out/parts.tsv
: >"$parts"
dev=cuda
[ $dry = 1 ] && dev=cpu
say() { echo "gpu_check: $*" | tee -a "$log" >&2; }

# part NAME LIMIT_S CMD...: runs CMD under a time limit into logs/NAME.log
# and records pass/fail (exit status) and its seconds.
part() {
    name=$1 limit=$2
    shift 2
    t0=$(date +%s)
    case $1 in
    deps | configure | parity | sanitize | sweep) # this script's own: run again for one part
        GC_SYSROOT=$sysroot GC_DEBS=$debs GC_BUILD=$build GC_LOGS=$logs GC_DEV=${dev:-cuda} \
            GC_OUT=$out GC_NVCC=${have_nvcc:-0} GC_MPICC=${mpicc:-mpicc} \
            timeout "$limit" sh "$root/scripts/gpu_check.sh" --run-part "$1" >"$logs/$name.log" 2>&1 ;;
    *) timeout "$limit" "$@" >"$logs/$name.log" 2>&1 ;;
    esac
    rc=$?
    t=$(($(date +%s) - t0))
    if [ $rc = 0 ]; then st=pass; elif [ $rc = 77 ]; then st=skip; else st=fail; fi
    [ $rc = 124 ] && echo "gpu_check: $name: past its $limit s" >>"$logs/$name.log"
    printf '%s\t%s\t%s\t%s\n' "$name" "$st" "$t" "$rc" >>"$parts"
    say "$name: $st (exit $rc, ${t}s)"
    tail -n 5 "$logs/$name.log" | sed "s/^/  $name| /" >>"$log"
    return $rc
}
skip() { printf '%s\tskip\t0\t-\n' "$1" >>"$parts"; say "$1: skipped ($2)"; }

# ---- deps: the carried packages, unpacked locally ----
sysroot=$root/.gpu_sysroot
mkdir -p "$sysroot"
part deps 120 deps
if [ -d "$sysroot/usr" ]; then
    lib=$sysroot/usr/lib/x86_64-linux-gnu
    export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib:${LD_LIBRARY_PATH:-}"
    export LIBRARY_PATH="$lib:$lib/openmpi/lib:${LIBRARY_PATH:-}"
    export CPATH="$sysroot/usr/include:$lib/openmpi/include:${CPATH:-}"
    export PKG_CONFIG_PATH="$lib/pkgconfig:$sysroot/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
    export CMAKE_PREFIX_PATH="$sysroot/usr:${CMAKE_PREFIX_PATH:-}"
    export PATH="$PATH:$sysroot/usr/bin"
    export OPAL_PREFIX="$sysroot/usr/lib/x86_64-linux-gnu/openmpi"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# ---- build ----
have_nvcc=0
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] && have_nvcc=1
mpicc=$(command -v mpicc || echo "$sysroot/usr/bin/mpicc")
if ! part build 300 configure; then
    say "the build failed: nothing else can run"
fi
bin=$build
built=0
[ -x "$bin/bfworker" ] && built=1

# ---- the GPU's own checks ----
if [ $built = 1 ] && [ $dry = 0 ]; then
    part parity 240 parity
    if command -v compute-sanitizer >/dev/null 2>&1; then
        part sanitize 150 sanitize
    else
        skip sanitize "no compute-sanitizer"
    fi
    BF_PARITY_DEVICE=cuda BF_PYTHON=${BF_PYTHON:-python3} part torch 120 \
        "$bin/test_it_parity_torch" --jobs 1 --verbose
elif [ $dry = 1 ]; then
    # the dry run: CUDA's parity must say it tested nothing (ctest's skip)
    part parity 60 "$bin/test_cuda_parity" --jobs 1
    skip sanitize "dry run"
    skip torch "dry run: the CPU dumps are test_it_parity_torch's own"
fi

# ---- benchmarks ----
if [ $built = 1 ]; then
    # the dry run: the same programs and flags at toy sizes (2 shared cores)
    ops= train= mixers= vit= bf16=
    if [ $dry = 1 ]; then
        ops="--reps 1" bf16="--reps 1" train="--steps 2 --peer none --L 1 --T 16 --d 32 --H 2 --B 4"
        mixers="--reps 1 --t 197 --d 192 --mode infer" vit="--reps 1 --batch 2 --layers 2"
    fi
    part bench_ops 90 sh -c "'$bin/bench_ops' --device $dev --json $ops >'$logs/bench_ops.json' && [ -s '$logs/bench_ops.json' ]"
    part bench_train 120 sh -c \
        "'$bin/bench_train' --device $dev --json $train >'$logs/bench_train.json' && [ -s '$logs/bench_train.json' ]"
    part bench_mixers 90 sh -c \
        "'$bin/bench_mixers' --device $dev --json $mixers >'$logs/bench_mixers.json' && [ -s '$logs/bench_mixers.json' ]"
    part bench_vit 90 sh -c "'$bin/bench_vit' --device $dev --json $vit >'$logs/bench_vit.json' && [ -s '$logs/bench_vit.json' ]"
    # cuBLASLt's bf16 products against fp32 at DeiT-Tiny's shapes (issue 39)
    part bench_bf16 60 sh -c "'$bin/bench_bf16' --device $dev --json $bf16 >'$logs/bench_bf16.json' && [ -s '$logs/bench_bf16.json' ]"
    # GPT-2-124M's trunk (12 layers, d 768, 12 heads, 1024 tokens, vocab 50257)
    if [ $dry = 0 ]; then
        part bench_gpt2 120 sh -c "'$bin/bench_train' --device cuda --json --peer none --L 12 \
            --d 768 --H 12 --T 1024 --V 50257 --B 8 --steps 10 >'$logs/bench_gpt2.json' && [ -s '$logs/bench_gpt2.json' ]"
    else
        skip bench_gpt2 "dry run"
    fi
fi

# ---- a 2-trial sweep through bfd ----
if [ $built = 1 ]; then part sweep 150 sweep; fi

# ---- summary.json ----
# MFU = 6 x 124e6 parameters x tokens/s over the H200's dense fp32 peak
# (67 TFLOP/s; bf trains in fp32, TF32 only with BF_CUDA_TF32=1)
mfu=null
if [ -s "$logs/bench_gpt2.json" ]; then
    tps=$(grep -o '"budget_off_tokens_per_s": *[0-9.]*' "$logs/bench_gpt2.json" | sed 's/.*: *//')
    [ -n "$tps" ] && mfu=$(awk -v t="$tps" 'BEGIN { printf "%.4f", 6 * 124e6 * t / 67e12 }')
fi
{
    printf '{"dry_run": %s, "device": "%s", "mfu_bench_train": %s, "parts": {' \
        "$([ $dry = 1 ] && echo true || echo false)" "$dev" "$mfu"
    sep=
    while IFS="$(printf '\t')" read -r n st t rc; do
        printf '%s"%s": {"status": "%s", "seconds": %s, "exit": "%s"}' "$sep" "$n" "$st" "$t" "$rc"
        sep=', '
    done <"$parts"
    printf '}}\n'
} >"$out/summary.json"
rm -f "$parts"
# in the dry run the parity program must skip (no GPU used), everything else pass
failed=$(grep -o '"[a-z_]*": {"status": "fail"' "$out/summary.json" | cut -d'"' -f2 | tr '\n' ' ')
if [ $dry = 1 ]; then
    grep -q '"parity": {"status": "skip"' "$out/summary.json" ||
        failed="$failed parity(not skipped in a dry run)"
else
    grep -q '"parity": {"status": "pass"' "$out/summary.json" || failed="$failed parity"
fi
[ -f "$out/bfhome/bfd.log" ] && cp "$out/bfhome/bfd.log" "$logs/bfd.log"
rm -rf "$out/bfhome"
(cd "$out" && tar czf logs.tar.gz logs && rm -rf logs)
cat "$out/summary.json" | tee -a "$log"
if [ -n "$failed" ]; then
    say "FAILED:$failed"
    exit 1
fi
say "all parts passed ($out/summary.json)"
exit 0
