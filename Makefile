# Two entry points for a fresh machine: `make demo` and `make test`.
# Every target provisions libtorch first (idempotent; cached under ~/.cache/mapf-ledger).
SHELL := /bin/bash
CARGO ?= cargo
# Where cargo puts what it builds ($CARGO_TARGET_DIR when set, as cargo itself reads it).
TARGET := $(or $(CARGO_TARGET_DIR),target)

.PHONY: all libtorch chromium build build-core test demo base-model base-model-indep base-model-indep-v2 base-model-indep-v3 base-model-indep-v4 reader-model coordination-pilot engineer-rl-pilot engineer-rl-v3 engineer-rl-v4 bench bench-peers bench-trainer-peers schemas fmt clean-ledgers

all: build

# Keep target/libtorch pointing at the provisioned libtorch (see .cargo/config.toml).
libtorch:
	@dir=$$(tools/libtorch.sh) && mkdir -p target && \
	if [[ -n "$$dir" ]]; then ln -sfn "$$dir" target/libtorch; fi

build: libtorch
	$(CARGO) build --release

# The report's browser test (tests/report.rs) drives a real headless Chromium.
chromium:
	@tools/chromium.sh >/dev/null

# The `ledger` built without the trainer first, copied to target/core/ledger
# (tests/core_binary.rs drives it): built in the tests' own profile, so it shares their
# compiled dependencies instead of compiling every one again in a profile of its own.
# The test build that follows puts the full binary back at target/debug/ledger (cargo
# re-links a binary's uplifted copy on every build). Then every crate's tests in one
# cargo invocation, so dependencies are compiled once with one feature set, and every
# bench compiled in the same profile (running them is `make bench`), so a change that
# breaks a bench fails CI too.
test: libtorch chromium
	$(CARGO) build --no-default-features --bin ledger
	mkdir -p $(TARGET)/core && cp $(TARGET)/debug/ledger $(TARGET)/core/ledger.tmp && mv $(TARGET)/core/ledger.tmp $(TARGET)/core/ledger
	LEDGER_CORE_BIN=$(abspath $(TARGET))/core/ledger $(CARGO) test --workspace
	$(CARGO) test --workspace --bench '*' --no-run

# `ledger` without libtorch: reads, verifies, audits, compares, reports, bundles and
# fetches ledgers; the training commands refuse. No libtorch is provisioned for it.
build-core:
	$(CARGO) build --release --no-default-features --bin ledger --target-dir target/lean

demo: build
	tools/demo.sh

# Models: three ship under ledgers/models/ (mapf-base-indep, mapf-reader-v2, the study's,
# and mapf-reader-v3, the demo's);
# the others are retired from the tree and keep their card (ledgers/cards/NAME.md, with
# the file hashes and scores they had), their recipe (ledgers/*.toml) and the target
# below that re-makes them.
#
# Re-make the retired base planner (ledgers/models/mapf-base, card ledgers/cards/mapf-base.md)
# from ledgers/base.toml:
# about 75 minutes on 2 cores, resumable (run it again after a stop).
base-model: build
	tools/base-model.sh

# The coordination miniature's base planner (ledgers/models/mapf-base-indep) from
# ledgers/base-indep.toml: pretrained on plans that need no coordination, scored on the
# CPU study's stratified suites. About 70 minutes on 2 cores, resumable.
base-model-indep: build
	BASE_PLAN=ledgers/base-indep.toml BASE_LEDGER=ledgers/base-indep-run \
	BASE_MODEL_OUT=ledgers/models/mapf-base-indep BASE_CARD=ledgers/cards/mapf-base-indep.md \
	BASE_EVAL_VAL="--per-cell 48 --wait-ratios 0.25,0.5,0.75" \
	BASE_EVAL_TEST="--per-cell 15 --wait-ratios 0.25,0.5,0.75" tools/base-model.sh

# The same base planner with an engineer that reads the evidence (engineer text revision
# 2, a 1,024-token prompt with training details): ledgers/base-indep-v2.toml, exported to
# ledgers/models/mapf-base-indep-v2. About 80 minutes on 2 cores, resumable.
base-model-indep-v2: build
	BASE_PLAN=ledgers/base-indep-v2.toml BASE_LEDGER=ledgers/base-indep-v2-run \
	BASE_MODEL_OUT=ledgers/models/mapf-base-indep-v2 BASE_CARD=ledgers/cards/mapf-base-indep-v2.md \
	BASE_EVAL_VAL="--per-cell 48 --wait-ratios 0.25,0.5,0.75" \
	BASE_EVAL_TEST="--per-cell 15 --wait-ratios 0.25,0.5,0.75" tools/base-model.sh

# The pilot of the curriculum lever from that base: fixed at wait 0 against fixed at
# wait 0.75, one GRPO stage of 120 steps each (tools/experiments/coordination-pilot.sh; resumable).
coordination-pilot: build
	tools/experiments/coordination-pilot.sh lo:0.0:120:0.0001:1:11 hi:0.75:120:0.0001:1:11

# The engineer half taught by continued pretraining: mapf-base-indep trained on, every
# other step, the revision-2 teacher's engineer examples (ledgers/base-indep-v3.toml),
# exported to ledgers/models/mapf-base-indep-v3. About 35 minutes on 2 cores, resumable.
base-model-indep-v3: build
	BASE_PLAN=ledgers/base-indep-v3.toml BASE_LEDGER=ledgers/base-indep-v3-run \
	BASE_MODEL_OUT=ledgers/models/mapf-base-indep-v3 BASE_CARD=ledgers/cards/mapf-base-indep-v3.md \
	BASE_EVAL_VAL="--per-cell 48 --wait-ratios 0.25,0.5,0.75" \
	BASE_EVAL_TEST="--per-cell 15 --wait-ratios 0.25,0.5,0.75" tools/base-model.sh

# v3's engineer at text revision 3 (the evidence weakest first, and before the JSON):
# ledgers/base-indep-v4.toml, trained on from mapf-base-indep-v3. About 50 minutes on 2
# cores, resumable.
base-model-indep-v4: build
	BASE_PLAN=ledgers/base-indep-v4.toml BASE_LEDGER=ledgers/base-indep-v4-run \
	BASE_MODEL_OUT=ledgers/models/mapf-base-indep-v4 BASE_CARD=ledgers/cards/mapf-base-indep-v4.md \
	BASE_EVAL_VAL="--per-cell 48 --wait-ratios 0.25,0.5,0.75" \
	BASE_EVAL_TEST="--per-cell 15 --wait-ratios 0.25,0.5,0.75" tools/base-model.sh

# The readers (ledgers/models/mapf-reader-v3, the demo's base, mapf-reader-v2, the
# study's, and the retired mapf-reader): mapf-base-indep-v4 taught to read its failure
# evidence by the reading pilot's rounds 1-4 and 6 (mapf-reader), then 8 (v2), then 9
# and 10 (v3), each from the last. About 8 hours
# on one core, resumable (tools/reader-model.sh). It starts from mapf-base-indep-v4,
# which no longer ships: `make base-model-indep-v3 base-model-indep-v4` first.
reader-model: build
	tools/reader-model.sh

# Engineer RL on its own: 40 engineer steps after one plan step, against a control fork
# without them, scored by `ledger engineer eval` (tools/experiments/engineer-rl-pilot.sh).
engineer-rl-pilot: build
	tools/experiments/engineer-rl-pilot.sh

# Engineer RL over the demo's 3 stages from mapf-base-indep-v3, against a control fork
# without it; base, control@stage3 and main@stage3 scored as engineers beside random,
# heuristic and learnability (tools/experiments/engineer-rl-v3.sh).
engineer-rl-v3: build
	tools/experiments/engineer-rl-v3.sh

# The same from mapf-base-indep-v4 at engineer text revision 3 (ledgers/pilots/engineer-rl-v4.toml).
engineer-rl-v4: build
	ERL_PLAN=ledgers/pilots/engineer-rl-v4.toml tools/experiments/engineer-rl-v3.sh

bench: libtorch
	$(CARGO) bench

bench-peers: build
	tools/bench-peers

# The trainer bench with its Python peers (transformers' generate(), TRL's GRPOTrainer)
# in the same run; the venv (torch 2.11.0, transformers, trl) is made once by tools/hf-venv.sh.
bench-trainer-peers: libtorch
	HF_PYTHON=$$(tools/hf-venv.sh) $(CARGO) bench --bench trainer

# Regenerate the checked-in JSON Schemas after changing a schema'd type.
schemas: build
	$(TARGET)/release/ledger schemas --out schemas

fmt:
	$(CARGO) fmt --all
