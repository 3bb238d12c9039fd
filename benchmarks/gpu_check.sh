#!/usr/bin/env bash
# CUDA checks of the library and the reference model, sized for a 10-minute slot on one GPU.
#
#   bash benchmarks/gpu_check.sh            # from the repository root, on a machine with a CUDA GPU
#
# 1. The test suite: the `device` fixture adds "cuda" when a GPU is present, so `pytest` covers every
#    device-parametrised test on CPU and CUDA. The POT reference tests need the `pot` package; where it is
#    missing, a wheel in .whl/ is installed (fetch it beforehand on a machine with a registry:
#    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl pot), else those two
#    files are skipped and the script says so.
# 2. FlexibleOT on CUDA (benchmarks/flexible_ot.py --device cuda --quick --no-scaling): the module eager, the
#    module under torch.compile (Triton) and POT's ot.solve_batch in one run (docs/guide/flexible_ot.rst).
# 3. Two epochs of `--config tvr` (the release's architecture and optimiser, 128 videos per batch) on the
#    release-sized synthetic set of benchmarks/release_fidelity.py (600 training videos x 4 captions,
#    3072-d frames, 768-d tokens), once with --amp (float16 autocast + gradient scaling) and once without;
#    prints the training time of each epoch and the peak GPU memory (torch.cuda.max_memory_allocated).
# 4. Only where `nvidia-smi -L` lists more than one GPU: the same two epochs through the command line under
#    torchrun (NCCL, one process per GPU, the global batch still 128 videos) and in one process, each with
#    its training time per epoch and test SumR (docs/guide/distributed.rst, "torchrun").
# 5. Where the video extra is installed: the own-videos index on CUDA against the encoder alone
#    (benchmarks/own_videos.py --device cuda --parts index; docs/guide/own_videos.rst).
# 6. Where the video extra is installed: the own-videos index under torchrun on 1 GPU and, where `nvidia-smi -L`
#    lists more, on every GPU (one process per GPU, each on cuda:LOCAL_RANK), frames per second against the
#    encoder alone in as many processes (benchmarks/sharded_index.py; docs/guide/larger_collections.rst).
#
# Expected wall time on one H200: about 1 minute of tests, under 1 minute for FlexibleOT (most of it compiling),
# 1-2 minutes to write the data, under 1 minute per run (leg 4: two more runs of under 1 minute each).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WORK=${GPU_CHECK_DIR:-/tmp/holmes_gpu_check}
mkdir -p "$WORK"

"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.__version__, torch.cuda.get_device_name(0))"

echo "== test suite (CPU and CUDA) =="
ignore=()
if ! "$PY" -c "import ot" 2>/dev/null; then
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$WORK/site" .whl/*.whl
    export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
  else
    echo "pot is not installed and .whl/ holds no wheel: skipping tests/test_sinkhorn.py and tests/test_flexible_ot.py"
    ignore=(--ignore=tests/test_sinkhorn.py --ignore=tests/test_flexible_ot.py)
  fi
fi
"$PY" -m pytest -q -x -p no:cacheprovider "${ignore[@]}"

echo "== FlexibleOT on CUDA: eager module / torch.compile (Triton) / POT =="
if "$PY" -c "import ot" 2>/dev/null; then
  "$PY" benchmarks/flexible_ot.py --device cuda --quick --no-scaling
else
  echo "pot is not installed: skipping the FlexibleOT benchmark"
fi

echo "== release-sized data =="
if [ ! -f "$WORK/data/tvr/FeatureData/synthetic/video2frames.txt" ]; then
  "$PY" benchmarks/release_fidelity.py data --root "$WORK/data"
fi

for amp in off on; do
  flag=()
  [ "$amp" = on ] && flag=(--amp)
  echo "== --config tvr, 2 epochs, 128 videos per batch, amp $amp =="
  "$PY" benchmarks/release_fidelity.py train --root "$WORK/data" --config tvr --epochs 2 --warmup-stage 1 \
    --hard-negative-epoch 1 --device cuda --threads 0 "${flag[@]}" --output-dir "$WORK/tvr_amp_$amp"
  "$PY" - "$WORK/tvr_amp_$amp/curve.json" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
for e in run["epochs"]:
    print(f"epoch {e['epoch']}: train {e['train_seconds']:.1f} s, peak GPU memory {e['peak_gpu_memory_gib']:.2f} GiB, "
          f"loss {e['loss/total']:.4f}, val SumR {e['val/SumR']:.1f}")
print(f"test SumR {run['test']['SumR']:.1f}; parameters {run['parameters_millions']:.2f} M")
EOF
done

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -gt 1 ]; then
  "$PY" - "$WORK/tvr_2_epochs.json" <<'EOF'
import sys
from reference_models.holmes.config import preset
preset("tvr").replace(schedule={"epochs": 2, "warmup_stage_epochs": 1, "hard_negative_epoch": 1}).to_json(sys.argv[1])
EOF
  for nproc in "$gpus" 1; do
    echo "== torchrun --nproc_per_node $nproc, --config tvr, 2 epochs, 128 videos per global batch =="
    "$PY" -m torch.distributed.run --nproc_per_node "$nproc" --master_addr 127.0.0.1 --master_port 29511 \
      -m reference_models.holmes train --data-root "$WORK/data" --collection tvr --visual-feature synthetic \
      --config-file "$WORK/tvr_2_epochs.json" --device cuda --no-progress --dist-timeout 600 --overwrite \
      --output-dir "$WORK/torchrun_$nproc" > "$WORK/torchrun_$nproc.log" 2>&1 \
      || { tail -20 "$WORK/torchrun_$nproc.log"; exit 1; }
    "$PY" - "$WORK/torchrun_$nproc/results.json" "$nproc" <<'EOF'
import json, sys
run = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]} process(es): train {run['efficiency']['train_seconds_per_epoch']:.1f} s per epoch, "
      f"test SumR {run['test']['recall']['SumR']:.1f} ({run['test_split']} split)")
EOF
  done
else
  echo "== one GPU: no multi-GPU (torchrun) leg =="
fi

# 5. Own videos: the index (decoding in worker processes, ViT-B-32 created without weights) on CUDA against
#    the encoder's forward alone on the same frames (benchmarks/own_videos.py; needs the video extra).
if "$PY" -c "import open_clip, av" 2>/dev/null; then
  echo "== own videos: index on CUDA, frames/s against the encoder alone =="
  "$PY" benchmarks/own_videos.py --device cuda --videos 48 --batch-size 128 --workers 4 --parts index
  counts=1
  [ "${gpus:-0}" -gt 1 ] && counts="1,$gpus"
  echo "== own videos: index under torchrun on $counts GPU(s), frames/s against the encoder alone =="
  "$PY" benchmarks/sharded_index.py --device cuda --processes "$counts" --videos 96 --batch-size 128 --workers 4 \
    --threads "$(nproc)" --repeats 1
else
  echo "== own videos: open_clip or av is not installed (pip install torch torchvision pairs, then .[video]): skipped =="
fi
