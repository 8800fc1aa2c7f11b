# Two entry points for a fresh machine: `make demo` and `make test`.
# Every target provisions libtorch first (idempotent; cached under ~/.cache/mapf-ledger).
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: all libtorch chromium build test demo base-model bench bench-peers bench-trainer-peers schemas fmt clean-ledgers

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

# The two crates that do not link libtorch first (seconds), then the application.
test: libtorch chromium
	$(CARGO) test -p ledger-store -p mapf-testbed
	$(CARGO) test -p mapf-ledger

demo: build
	tools/demo.sh

# Re-make the shipped base planner (ledgers/models/mapf-base) from ledgers/base.toml:
# about 75 minutes on 2 cores, resumable (run it again after a stop).
base-model: build
	tools/base-model.sh

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
	./target/release/ledger schemas --out schemas

fmt:
	$(CARGO) fmt --all
