# Tessera's front door. Every target sets itself up first (`make setup`), then calls the
# `tessera` command line, which is a thin layer over the Python packages.

PY      := .venv/bin/python
TESSERA := .venv/bin/tessera
STAMP   := .venv/.setup-stamp
R       ?= 8
C       ?= 8
BOARD   ?= ulx3s-85f
SEED    ?= 1
JOBS    ?= 2

# The hardware configuration (docs/config.md): CONFIG=FILE.toml|FILE.json or a preset name
# (default, tiny, ulx3s-85f, icebreaker, ...). R= and C=, when given, override its array size
# on the targets that build an array. (make serve/loadtest read CONFIG as their serve file.)
HW_GIVEN  = $(filter command line environment,$(origin $(1)))
HW_FILE   = $(if $(CONFIG),--config $(CONFIG))
HW_CONFIG = $(HW_FILE) $(if $(call HW_GIVEN,R),--rows $(R)) $(if $(call HW_GIVEN,C),--cols $(C))

.PHONY: help setup test sim verilog verilog-xdma bitstream bitstream-array bench demo demo-array lint clean

help:
	@echo "make setup                     .venv, pinned packages, PoCL (idempotent)"
	@echo "   CONFIG=file.toml|preset     the hardware for sim, verilog*, bitstream*, bench, soak,"
	@echo "                               demo*, run"
	@echo "                               (docs/config.md); R=.. C=.. override its array size"
	@echo "make demo                      the digits CNN on the Verilator twin vs CPU and onnxruntime"
	@echo "make demo-array [R=8 C=8]      a random GEMM on the Verilator-simulated array, checked"
	@echo "make test                      the whole test suite (pytest, cocotb on Verilator)"
	@echo "make sim [TB=name] [WAVES=1]   cocotb/Verilator testbenches with a pass/fail table"
	@echo "make verilog [R=8 C=8]         Verilog of the array into build/"
	@echo "make verilog-xdma [R=8 C=8]    the whole accelerator for Xilinx XDMA (docs/xdma.md)"
	@echo "make bitstream BOARD=ulx3s-85f the whole accelerator for a board (ulx3s-25f/45f/85f,"
	@echo "     [R=.. C=..] [CLOCK=MHz]   icebreaker): bitstream + build/<board>/report.json"
	@echo "     [SEED=1]                  ... nextpnr's placer seed"
	@echo "make bitstream-array BOARD=..  the bare systolic array under an on-chip pattern"
	@echo "make flash BOARD=.. [FLASH=1]  load build/<board>'s bitstream into the FPGA (SRAM),"
	@echo "                               FLASH=1: into its configuration flash (openFPGALoader)"
	@echo "make bench                     benchmarks into bench/results/*.json"
	@echo "make gpu-check [OUT=file.json] the torch provider's exactness and speed (any GPU)"
	@echo "make energy [MODEL=x.onnx] [BOARD=ulx3s-85f]  energy ESTIMATE per inference (docs/energy.md)"
	@echo "make soak [SEED=1] [COUNT=n]   10^4 random layers, every backend vs golden + onnxruntime"
	@echo "     [RAY=1|host:port]         ... as Ray tasks, local or on a cluster (docs/ray.md)"
	@echo "     [SEEDS=1-8]               ... every seed, each mismatch with its repro command"
	@echo "make lint                      ruff"
	@echo "make clean                     remove build/ and bench results"
	@echo "make run [MODEL=x.onnx] [BACKEND=cpu] [DATASET=digits|INPUT=x.npy]  run a QDQ model, profiled"
	@echo "         BACKEND=uart PORT=/dev/ttyUSB0: on a board over its UART; BACKEND=uart-twin: the serial twin"
	@echo "make quantize [MODEL=x.onnx] [CALIB=digits|x.npy] [METHOD=minmax] [OUT=y.onnx]"
	@echo "make zoo / make zoo-digits     random zoo models into build/zoo / retrain the digits CNN"
	@echo "make zoo-vit / make zoo-rnn    retrain the digits ViT / row GRU (docs/zoo.md)"
	@echo "make serve [CONFIG=x.toml]     KServe v2 inference server on 127.0.0.1 (docs/serving.md)"
	@echo "     [RAY=1|host:port] [REPLICAS=n]  ... as Ray Serve replicas (docs/scale-out.md)"
	@echo "make loadtest [LOAD='a=50 b=c4'] traffic to a running make serve, answers checked"
	@echo "make build-model [MODEL=x.onnx] [BOARD=ulx3s-85f] [DRY=1] [OUT=dir]"
	@echo "                               searches a configuration for it, then builds it"
	@echo "                               (docs/build.md); DRY=1: the search alone"
	@echo "make sweep [SIZES=2x2,4x4]     array sizes x boards, cached (docs/build.md)"
	@echo "     [BOARDS=..] [JOBS=2] [RAY=1|host:port]"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml scripts/setup.sh
	bash scripts/setup.sh
	@touch $@

# pytest's exit code 5 means nothing was collected: that is a failure, not a pass.
test: setup
	@$(PY) -m pytest -n $(JOBS) --dist loadgroup -p no:cacheprovider; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; \
	exit $$rc

sim: setup
	$(TESSERA) sim $(if $(TB),--tb $(TB)) $(if $(filter 1,$(WAVES)),--waves) --seed $(SEED) \
		$(HW_FILE)

verilog: setup
	$(TESSERA) verilog $(HW_CONFIG)

verilog-xdma: setup
	$(TESSERA) verilog --target xdma $(HW_CONFIG)

# R and C only when given (make R=4 or the environment): otherwise the board's own
# configuration (docs/boards.md), which is not 8x8 on the smaller boards.
GIVEN = $(filter command line environment,$(origin $(1)))
bitstream: setup
	$(TESSERA) bitstream --board $(BOARD) $(if $(call GIVEN,R),--rows $(R)) \
		$(if $(call GIVEN,C),--cols $(C)) $(if $(CLOCK),--clock-mhz $(CLOCK)) \
		$(if $(call GIVEN,SEED),--seed $(SEED)) $(HW_FILE)

bitstream-array: setup
	$(TESSERA) bitstream --array --board $(BOARD) $(if $(call GIVEN,R),--rows $(R)) \
		$(if $(call GIVEN,C),--cols $(C)) \
		$(if $(call GIVEN,SEED),--seed $(SEED)) $(HW_FILE)

# The bitstream of `make bitstream BOARD=..` into the board's SRAM (lost at power-off), or
# with FLASH=1 into its configuration flash; needs the board on USB (docs/boards.md).
.PHONY: flash
flash: setup
	$(TESSERA) flash --board $(BOARD) $(if $(filter 1,$(FLASH)),--flash)

bench: setup
	OPENBLAS_NUM_THREADS=1 $(TESSERA) bench $(NAMES) $(HW_FILE)

# The torch provider's device check (docs/performance.md): installs nothing, one JSON
# (bench/results/gpu_check.json, or OUT=path); on a machine without CUDA, the CPU path.
.PHONY: gpu-check
gpu-check:
	$(if $(wildcard .venv/bin/python),.venv/bin/python,python3) scripts/gpu_check.py \
		$(if $(OUT),--out $(OUT))

# Energy ESTIMATE per inference from the energy twin's switching activity (docs/energy.md);
# the energy twin is built on first use (a minute or two).
.PHONY: energy
energy: setup
	$(TESSERA) energy $(or $(MODEL),models/zoo/digits_qdq.onnx) --board $(BOARD)

# 10**4 random layer configurations through every provider against the golden models and
# onnxruntime (bench/results/soak.json); ONLY=4711 repeats one case and prints it in full.
# RAY=1 runs it on a local Ray, RAY=host:port on that cluster (docs/ray.md). RESIDENT=1 runs
# random resident programs instead (300 by default; bench/results/soak_resident.json).
.PHONY: soak
soak: setup
	OPENBLAS_NUM_THREADS=1 $(TESSERA) soak --seed $(SEED) $(if $(COUNT),--count $(COUNT)) \
	  $(if $(RESIDENT),--resident) $(if $(ONLY),--only $(ONLY)) $(if $(SEEDS),--seeds $(SEEDS)) \
	  $(if $(RAY),--ray $(filter-out 1,$(RAY))) $(HW_FILE)

demo: setup
	$(TESSERA) demo $(HW_FILE)

demo-array: setup
	$(TESSERA) demo-array $(HW_CONFIG)

lint: setup
	$(PY) -m ruff check .

clean:
	rm -rf build sim_build bench/results

# -- host runtime: run a model, quantize one, (re)build the zoo -----------------------------
# `make run` alone runs the shipped digits model on the digits test split (with accuracy).
# SEQUENCE_MODE=integer runs a sequence model's Softmax/LayerNorm/GELU integer-only.
DIGITS_QDQ := models/zoo/digits_qdq.onnx
CALIB      ?= digits
METHOD     ?= minmax
# quantize's default output file; OUT itself has no global default, because build-model
# reads OUT as its output folder.
QUANTIZED  := build/zoo/digits_tessera_qdq.onnx

.PHONY: run quantize zoo zoo-digits zoo-vit zoo-rnn

run: setup
	$(TESSERA) run $(or $(MODEL),$(DIGITS_QDQ)) $(if $(BACKEND),--providers $(BACKEND)) \
	  $(if $(DATASET),--dataset $(DATASET),$(if $(or $(MODEL),$(INPUT)),,--dataset digits)) \
	  $(if $(INPUT),--input $(INPUT)) $(if $(BATCH),--batch $(BATCH)) \
	  $(if $(PORT),--port $(PORT)) $(if $(filter 1,$(PROFILE)),--profile) $(HW_FILE) \
	  $(if $(SEQUENCE_MODE),--sequence-mode $(SEQUENCE_MODE))

quantize: setup
	$(TESSERA) quantize $(or $(MODEL),models/zoo/digits_float.onnx) --calibration $(CALIB) \
	  --method $(METHOD) -o $(or $(OUT),$(QUANTIZED))

zoo: setup
	$(TESSERA) zoo

zoo-digits: setup
	$(TESSERA) zoo --digits

zoo-vit: setup
	$(TESSERA) zoo --vit

zoo-rnn: setup
	$(TESSERA) zoo --rnn

# -- serving: KServe v2 over HTTP on 127.0.0.1 (docs/serving.md) ----------------------------
# `make serve` alone serves the shipped digits model for two demo tenants on port 8000.
SERVE_EXAMPLE := tessera/serve/example.toml

.PHONY: serve
serve: setup
	$(TESSERA) serve --config $(or $(CONFIG),$(SERVE_EXAMPLE)) $(if $(PORT),--port $(PORT)) \
	  $(if $(RAY),--ray $(filter-out 1,$(RAY))) $(if $(REPLICAS),--replicas $(REPLICAS))

# Against a server already running with the same CONFIG: LOAD is NAME=RATE (Poisson req/s)
# or NAME=cN (N closed-loop clients) per tenant; bounded to 10 s. PLOT=x.png draws it.
.PHONY: loadtest
loadtest: setup
	$(TESSERA) loadtest --config $(or $(CONFIG),$(SERVE_EXAMPLE)) --duration 10 \
		$(foreach t,$(or $(LOAD),alice=50 bob=10),--tenant $(t)) $(if $(PLOT),--plot $(PLOT))

# -- design-space search and sweep (docs/build.md) -----------------------------------------
# make build-model MODEL=x.onnx BOARD=ulx3s-85f [DRY=1]: search, then the bitstream.
# make sweep [SIZES=2x2,4x4,8x8] [BOARDS=ulx3s-85f,icebreaker] [JOBS=2] [RAY=1|host:port]:
# whole-accelerator builds, cached per configuration, into bench/results/sweep.json + .png.
.PHONY: build-model sweep
build-model: setup
	$(TESSERA) build $(or $(MODEL),models/zoo/digits_qdq.onnx) --board $(BOARD) \
	  $(if $(OUT),--out $(OUT)) $(if $(DRY),--dry-run)

sweep: setup
	$(TESSERA) sweep $(if $(SIZES),--sizes $(SIZES)) $(if $(BOARDS),--boards $(BOARDS)) \
	  --jobs $(JOBS) $(if $(RAY),--ray $(filter-out 1,$(RAY))) $(if $(FIT),--fit)
