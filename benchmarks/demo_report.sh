#!/usr/bin/env bash
# The demo's report grid (issue #26 item 3): specdec_demo for each drafter and tree x (greedy; T = 0.7 with
# top-p 0.9) x context length, one run each, then a Markdown table, a TSV and, where python3-matplotlib is
# installed, a plot of tokens/s and tau against the context length.
#   benchmarks/demo_report.sh BIN OUT_DIR [NEW_TOKENS [CONTEXT ...]]
# e.g. benchmarks/demo_report.sh build/demo-native/examples/specdec_demo /tmp/report 256 4096 16384 32768
# (defaults: 256 new tokens; contexts 4096 16384 32768). Writes OUT_DIR/demo_report.{tsv,md,png}. Each run is
# the demo's own A/B (autoregressive, then speculative, same process), so a speedup is never compared across
# runs. A greedy run whose output differs from autoregressive decoding stops the script.
set -euo pipefail
if (( $# < 2 )); then
  echo "usage: $0 BIN OUT_DIR [NEW_TOKENS [CONTEXT ...]]" >&2
  exit 2
fi
bin=$1; out=$2; new=${3:-256}; shift $(( $# >= 3 ? 3 : $# ))
contexts=("$@"); (( ${#contexts[@]} )) || contexts=(4096 16384 32768)
mkdir -p "$out"
# label | demo arguments | modes (empty: both). The grids in RESULTS.md before session 39 ran prompt lookup
# with 1-4 tokens and lookup+longspec with 3-4 (then the defaults); the lookup rows now name their lengths.
# Fixed depth 4 greedy, anchor-offset vs vanilla-index draft: LongSpec
# Table 2's question is tau, which adaptive depth would hide by drafting less.
configs=(
  "LongSpec chain|--drafter longspec --tree chain"
  "LongSpec chain, fixed depth 4|--drafter longspec --tree chain --fixed-depth --depth 4|greedy"
  "LongSpec chain, fixed depth 4, vanilla-index draft|--drafter longspec --tree chain --fixed-depth --depth 4 --draft-weights longspec_draft_vanilla.safetensors|greedy"
  "LongSpec beam [4,16,16,16,16], 12 nodes|--drafter longspec --tree beam --nodes 12"
  "LongSpec + CAPE, 12 nodes|--drafter longspec --tree cape --nodes 12"
  "TokenSwift self-drafting|--drafter tokenswift"
  "prompt lookup, 1-12 tokens|--drafter ngram --lookup-max 12"
  "prompt lookup of 2-12 tokens, else the LongSpec chain (the default)|--drafter lookup+longspec --lookup-min 2 --lookup-max 12"
)
modes=("greedy|" "T=0.7 top-p 0.9|--temperature 0.7 --top-p 0.9")
tsv=$out/demo_report.tsv
printf 'config\tmode\tcontext\ttau\talpha\tar_tok_s\tspec_tok_s\tspeedup\tlossless\tdraft_bytes\n' > "$tsv"
for ctx in "${contexts[@]}"; do
  for c in "${configs[@]}"; do
    IFS='|' read -r label args only <<<"$c"
    for m in "${modes[@]}"; do
      IFS='|' read -r mode margs <<<"$m"
      [[ -n "${only:-}" && "$mode" != "$only" ]] && continue
      # shellcheck disable=SC2086
      res=$("$bin" --quiet --show 0 --prompt "$ctx" --new "$new" $args $margs 2>&1) ||
        { echo "run failed or not lossless: $bin --prompt $ctx --new $new $args $margs" >&2; echo "$res" >&2; exit 1; }
      line=$(grep -m1 '^summary:' <<<"$res") || { echo "no summary line from: $bin $args $margs" >&2; echo "$res" >&2; exit 1; }
      get() { grep -oP "\\b$1=\\K[^ ]+" <<<"$line"; }
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$mode" "$ctx" "$(get tau)" "$(get alpha)" \
        "$(get ar_tok_s)" "$(get spec_tok_s)" "$(get speedup)" "$(get lossless)" "$(get draft_bytes)" | tee -a "$tsv"
    done
  done
done
{
  echo "| drafter, tree | mode | context | tau | alpha | AR tok/s | spec tok/s | speedup | lossless | draft memory |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  tail -n +2 "$tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %.2f | %.2f | %.0f | %.0f | **%.2fx** | %s | %s |\n",
    $1, $2, $3, $4, $5, $6, $7, $8, $9, ($10 > 0 ? sprintf("%.0f KB", $10 / 1024) : "n-gram index") }'
} > "$out/demo_report.md"
cat "$out/demo_report.md"
if /usr/bin/python3 -c "import matplotlib" 2>/dev/null; then
  /usr/bin/python3 "$(dirname "$0")/plot_demo_report.py" "$tsv" "$out/demo_report.png"
else
  echo "(no plot: python3-matplotlib is not installed)"
fi
