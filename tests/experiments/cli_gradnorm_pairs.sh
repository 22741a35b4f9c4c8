#!/usr/bin/env bash
# `clformer gradnorm` on an encoder-decoder at toy size (1 + 1 and 2 + 2 blocks, d_model 16, tiny
# synthetic parallel files): the report holds both series, the decoder's and the encoder's, every norm
# finite and positive, the scaling table consistent with the per-layer means; the BPE is learned once
# into OUT/bpe.merges; `check` names the depths' keys it replaces.
bin=$1
source "$(dirname "${BASH_SOURCE[0]}")/../lib/cli.sh"
require_opencl
cd "$tmp"
toy_pairs reverse train=300 valid=20
cat > gn.yaml <<'YAML'
base:
  seed: 3
  data: {train: train, valid: valid, source_lang: src, target_lang: tgt, tokenizer: bpe, vocab_size: 300,
         max_tokens: 128, max_len: 16}
  model: {arch: encoder_decoder, d_model: 16, heads: 2, d_ff: 32, tie_embeddings: true, label_smoothing: 0.1}
depths: [1, 2]
seeds: 2
out: gn-out
YAML
out=$("$bin" check gn.yaml 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"model.layers and model.encoder_layers are replaced"* ]] \
  && ok "check passes an encoder-decoder gradnorm file" || bad "check: rc=$rc $out"
out=$("$bin" gradnorm gn.yaml 2>&1); rc=$?
[[ $rc -eq 0 && "$out" == *"decoder  Pre-LN"*"fitted L^"* && "$out" == *"encoder  Post-LN"*"fitted L^"* ]] \
  && ok "gradnorm exits 0 and prints both stacks' exponents" || bad "gradnorm rc=$rc: $out"
[[ -s gn-out/bpe.merges && $(grep -c "learned .* BPE merges" <<< "$out") -eq 1 ]] && ok "the BPE learned once into OUT/bpe.merges" \
  || bad "bpe.merges: $(ls gn-out) $out"
python3 - <<'PY' && ok "gradnorm.json: the decoder's and the encoder's series, finite and consistent" || bad "gradnorm.json"
import json, math, re, xml.etree.ElementTree as ET
g = json.load(open("gn-out/gradnorm.json"))
assert g["arch"] == "encoder_decoder" and g["depths"] == [1, 2] and g["seeds"] == 2, g.keys()
for stack in (g, g["encoder"]):  # the top level holds the decoder's, "encoder" the encoder's
    for p in ("post", "pre"):
        for d in ("1", "2"):
            for what in ("mean", "sd"):
                rows = stack["placements"][p][d][what]
                assert len(rows) == int(d) and all(len(r) == 5 and all(math.isfinite(x) for x in r) for r in rows)
            assert all(x > 0 for r in stack["placements"][p][d]["mean"] for x in r)
        sc = stack["last_layer_w2_scaling"][p]
        assert all(abs(sc["norms"][i] - stack["placements"][p][d]["mean"][-1][1]) < 1e-5 * sc["norms"][i]
                   for i, d in enumerate(("1", "2")))
        assert math.isfinite(sc["exponent"]) and len(sc["per_seed"]) == 2
        assert abs(math.log(sc["norms"][1] / sc["norms"][0]) / math.log(2) - sc["exponent"]) < 1e-3, sc
assert g["placements"]["pre"]["2"] != g["encoder"]["placements"]["pre"]["2"]
md = open("gn-out/gradnorm.md").read()
for h in ("## 2 layers: decoder", "## 2 layers: encoder", "| decoder | Pre-LN |", "| encoder | Post-LN |"):
    assert h in md, h
assert not re.search(r"\b(nan|inf)\b", md, re.I)
svg = open("gn-out/gradnorm.svg").read()
ET.fromstring(svg)
assert "Pre-LN decoder" in svg and "Post-LN encoder" in svg
PY
exit $fail
