#!/bin/bash
# membership attack sweep on embedded (task, label vocabulary, ICL prompt size, seed)
cd /work/main
run() {  # task vocab shots seed
  extra=""; [ "$3" != all ] && extra="--icl-shots $3"
  out=/tmp/mia/out/sweep/$1_$2_icl$3_seed$4
  .venv/bin/dpmtv attack --model embedded --embedded-task $1 --label-vocabulary $2 \
    --num-members 64 --num-non-members 64 --heads layers:0 --epsilon 1 --delta 1e-5 \
    --l2-clip-norm auto --shots-per-chunk 8 --non-private-mtv --shadow --seed $4 $extra --out $out --quiet > $out.log 2>&1
  echo "$1 $2 $3 $4 rc=$? $(date +%T)"
}
for seed in 0 1 2; do run name_colour task all $seed; done
for seed in 0 1 2; do run name_colour task 4 $seed; done
for seed in 0 1 2; do run is_big task all $seed; run is_big task 4 $seed; done
run name_colour all all 0; run name_colour all 4 0
