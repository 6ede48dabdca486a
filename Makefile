# hvdbench: the one entry point for people and CI.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.hvdbench-ready
MODE ?= torch-ddp
ARGS ?=
PYTEST_ARGS ?=
STACK ?= current
FLAVOR ?= cuda
# The image tests build the CPU flavour from the inputs `make publish STACK=current FLAVOR=cpu` uses (the stack's base,
# or the debootstrapped bookworm where no registry serves it; PyTorch's CPU wheel staged by tools/images.py). With
# --cache frameworks an image whose inputs other than bench/ did not change is kept: the system tiers bind the
# checkout's bench/ over the one it holds (HVDBENCH_CLUSTER_BENCH for the cluster's nodes), and the image tier's
# publish round trip builds it as users get it.
IMAGE_TEST_BUILD ?= --stack current --flavor cpu --cache frameworks
# The CUDA image test-image-cuda builds: on the same base, its self-test one mode per framework environment.
IMAGE_CUDA_TEST_BUILD ?= --stack current --flavor cuda --base hvdbench-base:bookworm --self-test-modes "torch-ddp tf-horovod" \
  --cache frameworks
test-system-build test-cluster test-diagnose test-apptainer: export HVDBENCH_CLUSTER_BENCH := $(CURDIR)/bench

.PHONY: test-browser test-surface bench-data-queue test-system-prepare test-system-install test-system-cuda test-system-build bench-converge bench-data-cost bench-data-check gpu-check-prepare gpu-check help venv bench test test-unit test-framework test-multiproc test-system test-slurm test-sif-pull test-gpu-check test-bare-debian test-times test-fast lint bench-attribution bench-overhead bench-publish bench-reference bench-tuning bench-allreduce sparse-study verify predict-published image images test-image test-image-cuda cluster-up test-cluster test-diagnose test-k8s cluster-down cluster-exec docker-up k8s-examples k8s-check singularity apptainer-up sif sif-def sif-pull sif-check publish registry-up test-apptainer slurm-up clean
SIF ?= hvdbench-$(STACK)-$(FLAVOR).sif
SIF_COMPRESSION ?= gzip
# apptainer or singularity: one on PATH, else the one tools/apptainer-up.sh sets up.
APPTAINER_PATH = $$(tools/apptainer-up.sh):$$PATH
REGISTRY ?= ghcr.io/hvdbench
help: ## this list: every target, from the comment on its line
	@awk 'BEGIN {FS = ":[^#]*## "} /^[a-z][a-z0-9-]*:.*## / {printf "make %-20s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(STAMP) ## the venv with torch, tensorflow-cpu, tf-keras and patched Horovod (first time: about 5 minutes)
$(STAMP): pyproject.toml requirements/venv.txt requirements/hybrid.txt tools/setup.sh docker/build-horovod.sh $(wildcard docker/horovod/*.patch)
	tools/setup.sh $(VENV) $(PYTHON)
	touch $(STAMP)

bench: venv ## set up (first time) and run a benchmark that fits this machine (MODE=torch-ddp ARGS=...)
	$(VENV)/bin/bench $(MODE) $(ARGS)

# The tiers (docs/development.md), cheapest first: tests/<tier>/ holds each tier's tests; tests/conftest.py marks
# each test with its folder's tier, which is what the targets select (a PYTEST_ARGS path narrows it to one file).
TEST_TIMES ?= results/test-times
export HVDBENCH_TEST_TIMES := $(TEST_TIMES)
RUN_TESTS = tools/run-tests.sh $(PY)
# A system tier that passed on exactly the same inputs is not run again (tools/tier_cache.py; HVDBENCH_RERUN=1);
# one whose features passed on the same surface of bench/ runs its smoke tests only (`select`: tools/surface.py).
# The standard library alone: asked before the venv exists, by the set-up that make test starts beside it.
TIER_CACHE = $(PYTHON) -m tools.tier_cache
# The system tiers' set-up runs beside the venv's and then beside lint and the unit, framework and multiproc tiers,
# in a session of its own (taken down if make test ends first): the services and the base image first
# (test-system-install), then the CUDA image (test-system-cuda), neither of which needs the venv, and beside it,
# once the venv is ready, the other images (test-system-build). The multiproc tests marked alone and the system
# tiers start after it has ended. Its wall time and exit code are kept as system-prepare.beside,
# its output in its .log; the venv's as venv.took.
# First of all it asks which system tiers this machine cannot run (no root, no Docker: tools/tier_cache.py
# blocked), says so at once, starts no set-up for them, runs every other tier, and fails naming them.
test: ## set up (first time), lint, then every tier: unit, framework, multiproc, system
	@rm -rf $(TEST_TIMES); mkdir -p $(TEST_TIMES); rc=0; start=$$(date +%s); \
	blocked=$$($(TIER_CACHE) blocked) || exit 1; \
	[[ -z $$blocked ]] || echo "make test: the system tiers $$blocked cannot run here (why: above); running every" \
	  "other tier, then failing (as root, make test runs them all)" >&2; \
	if [[ -n $$blocked ]]; then echo "0 0" > $(TEST_TIMES)/system-prepare.beside; true & prep=$$!; else \
	setsid bash -c 's=$$(date +%s); r=0; $(MAKE) --no-print-directory test-system-install || r=1; \
	  if [[ $$r == 0 ]]; then $(MAKE) --no-print-directory test-system-cuda & cuda=$$!; \
	    while [[ ! -e $(TEST_TIMES)/venv.ready ]]; do sleep 2; done; \
	    $(MAKE) --no-print-directory test-system-build || r=1; wait $$cuda || r=1; \
	    $(PYTHON) -m tools.images prune || r=1; fi; \
	  echo "$$(( $$(date +%s) - s )) $$r" > $(TEST_TIMES)/system-prepare.beside; exit $$r' \
	  > $(TEST_TIMES)/system-prepare.log 2>&1 < /dev/null & prep=$$!; fi; \
	trap 'kill -- -'$$prep' 2>/dev/null' EXIT; \
	$(MAKE) --no-print-directory venv || rc=1; \
	echo "$$(( $$(date +%s) - start )) $$rc" > $(TEST_TIMES)/venv.took; \
	[[ $$rc == 1 ]] || touch $(TEST_TIMES)/venv.ready; \
	for tier in lint test-unit test-framework test-browser test-multiproc; do [[ $$rc == 1 ]] && break; \
	  HVDBENCH_TEST_AWAIT_PID=$$prep $(MAKE) --no-print-directory $$tier || rc=1; done; \
	[[ $$rc == 1 ]] || wait $$prep || { rc=1; echo "make test: the system set-up failed (its output:" \
	  "$(TEST_TIMES)/system-prepare.log)"; }; \
	[[ $$rc == 1 ]] || $(MAKE) --no-print-directory test-system SKIP_TIERS="$$blocked" || rc=1; \
	echo $$(( $$(date +%s) - start )) > $(TEST_TIMES)/make-test.total; \
	[[ ! -x $(PY) ]] || $(PY) -m tools.times $(TEST_TIMES); \
	[[ -z $$blocked ]] || { rc=1; echo "make test: not run here: the system tiers $$blocked (run make test as" \
	  "root, with Docker, for them)" >&2; }; exit $$rc

test-browser: ## Debian's chromium, for the test that opens bench report --html headless (installed as root)
	@command -v chromium >/dev/null || { [[ $$(id -u) == 0 ]] && command -v apt-get >/dev/null && \
	  tools/apt-install.sh chromium; } || echo "test-browser: chromium not installed (root installs it); the HTML \
	report's browser test is skipped"

test-unit: venv ## the unit tier: in process, no framework, no subprocess (under a minute)
	$(RUN_TESTS) unit -m unit $(or $(PYTEST_ARGS),tests/unit)

test-framework: venv ## the framework tier: the models and results with the frameworks imported in process
	$(RUN_TESTS) framework -m framework $(or $(PYTEST_ARGS),tests/framework)

# Two test files at a time (pytest-xdist), then the tests marked alone with nothing beside them
# (tools/run-tests.sh); MULTIPROC_WORKERS=1 runs them all one at a time.
MULTIPROC_WORKERS ?= 2
test-multiproc: venv ## the multiproc tier: real multi-process runs under every launcher, endings and faults
	HVDBENCH_TEST_WORKERS=$(MULTIPROC_WORKERS) $(RUN_TESTS) multiproc -m multiproc $(or $(PYTEST_ARGS),tests/multiproc)

# The system tiers' tests: tests/system, or the file PYTEST_ARGS names.
SYSTEM_TESTS = $(or $(PYTEST_ARGS),tests/system)
# Slurm, then the images, the cluster of containers, the CUDA image, the SIFs and the GPU check on the CPU: each
# rebuilds only what changed, and each runs only when its inputs changed since it last passed here.
# Each tier as TIER:its target, in that order; SKIP_TIERS (tier names) leaves those out.
SYSTEM_TIERS = slurm:test-slurm image:test-image kubernetes:test-k8s cluster:test-cluster diagnose:test-diagnose \
  image_cuda:test-image-cuda apptainer:test-apptainer sif_pull:test-sif-pull gpu_check:test-gpu-check \
  bare_debian:test-bare-debian
SKIP_TIERS ?=
test-system: venv ## the system tiers below, each only when its inputs changed since it last passed
	@for t in $(SYSTEM_TIERS); do [[ " $(SKIP_TIERS) " == *" $${t%%:*} "* ]] && continue; \
	  $(MAKE) --no-print-directory $${t#*:} || exit 1; done

# The quick check before a commit: the unit and framework tiers.
test-fast: test-unit test-framework ## the unit and framework tiers: the check before a commit

# What the system tiers start and build before their tests, for those whose inputs changed since they passed:
# the services and the debootstrapped base, the CUDA image (neither needs the venv: make test starts them beside
# the venv's set-up), then the CPU image (its Horovod the venv's wheel), the cluster's node image and Apptainer
# (its own debootstrapped root). Every step is cached, so the tiers' own calls of the same steps then do nothing.
test-system-prepare: test-system-install test-system-cuda test-system-build ## the system tiers' set-up alone (make test runs it beside the first tiers)
	$(PYTHON) -m tools.images prune

test-system-install: docker-up ## the system tiers' services (Docker, Slurm, the registry) and base image: no venv needed
	@if $(TIER_CACHE) stale slurm apptainer sif_pull; then tools/slurm-up.sh >/dev/null; fi
	@if $(TIER_CACHE) stale image sif_pull; then tools/registry-up.sh >/dev/null; fi
	@if $(TIER_CACHE) stale image kubernetes cluster diagnose image_cuda apptainer sif_pull; then \
	  $(PYTHON) -m tools.images base; fi

# The CUDA SIF its contract runs (tests/system/test_contract.py), made as that test makes it: kept in the SIF folder
# and keyed by the CUDA image's frameworks stage, so it is built again only when that stage changes.
CUDA_TEST_SIF = $${HVDBENCH_SIF_DIR:-/var/cache/hvdbench/sif}/hvdbench-current-cuda.sif
test-system-cuda: docker-up ## the CUDA image the image_cuda tier tests and its SIF, on the base image: no venv needed
	@if $(TIER_CACHE) stale image_cuda; then $(PYTHON) -m tools.images build $(IMAGE_CUDA_TEST_BUILD) && \
	  mkdir -p $$(dirname $(CUDA_TEST_SIF)) && PATH=$(APPTAINER_PATH) $(PYTHON) -m tools.sif image --stack current \
	  --flavor cuda --cache frameworks --compression zstd --output $(CUDA_TEST_SIF); fi

test-system-build: venv docker-up ## the CPU image (Horovod from the venv's wheel), the cluster's node image, Apptainer
	@if $(TIER_CACHE) stale image kubernetes cluster diagnose apptainer sif_pull; then \
	  $(PY) -m tools.images build $(IMAGE_TEST_BUILD); fi
	@if $(TIER_CACHE) stale cluster diagnose; then $(PY) -m tools.cluster build; fi
	@if $(TIER_CACHE) stale apptainer sif_pull; then tools/apptainer-up.sh >/dev/null; fi

# Which of bench/ the unit, framework and multiproc tiers run (coverage.py over them and every process they start):
# tools/lower-covered.txt, from which the system tiers' feature tests are keyed (tools/surface.py).
test-surface: venv ## measure which of bench/ the lower tiers run (about 30 minutes): tools/lower-covered.txt
	$(PY) -m tools.surface measure

test-times: venv ## each tier's wall time and the 20 slowest tests of the last make test
	$(PY) -m tools.times $(TEST_TIMES)

test-slurm: venv slurm-up ## system tier: a one-node Slurm here, srun and sbatch runs of every mode
	@$(TIER_CACHE) fresh slurm || { $(RUN_TESTS) slurm \
	  -m "slurm and not apptainer and not cluster$$($(TIER_CACHE) select slurm)" $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record slurm; }

# The GPU check's short form on the CPU (tools/gpu-check.sh --short) and the wheels it carries: no service needed.
test-gpu-check: venv ## system tier: the GPU check's short form on this CPU (tools/gpu-check.sh --short)
	@$(TIER_CACHE) fresh gpu_check || { $(RUN_TESTS) gpu_check -m gpu_check $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record gpu_check; }

# README's set-up from nothing: make bench in a container of the debootstrapped base that holds only what README
# says to install first (tests/system/test_bare_debian.py); keyed by the set-up's files, not by bench/.
test-bare-debian: venv docker-up ## system tier: README's make bench as root in a bare Debian 12 container
	@$(TIER_CACHE) fresh bare_debian || { $(RUN_TESTS) bare_debian -m bare_debian $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record bare_debian; }

lint: venv ## ruff over the whole tree, hadolint on the Dockerfiles, bash -n on the scripts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/hadolint docker/Dockerfile docker/Dockerfile.cuda docker/cluster/Dockerfile
	bash -n tools/*.sh tools/benchmarks/*.sh docker/*.sh docker/cluster/*.sh .ci/run

docker-up: ## install (first time) and start a Docker engine here
	tools/docker-up.sh

# The image builds need no venv: Docker (an engine that answers; tools/docker-up.sh) and python3. They run under the
# venv's Python where one is set up (its Horovod wheels are reused by the CPU image), else under $(PYTHON).
IMAGE_PY = $(if $(wildcard $(STAMP)),$(PY),$(PYTHON))
image: docker-up ## build hvdbench:STACK-FLAVOR (default current-cuda, also tagged hvdbench:latest); no venv needed
	$(IMAGE_PY) -m tools.images build --stack $(STACK) --flavor $(FLAVOR)

images: docker-up ## build every stack x flavour
	for s in $$($(IMAGE_PY) -m tools.images stacks); do for f in cpu cuda; do \
	  $(IMAGE_PY) -m tools.images build --stack $$s --flavor $$f || exit 1; done; done

# Build, self-test and push to REGISTRY (tools/publish.py; the release workflow runs this). DRY_RUN=1 shows the
# Dockerfile, build args, tags and labels and does nothing. STACK and FLAVOR take comma-separated lists or all.
# Like make image, no venv: python3 with the Docker SDK for Python (the venv's where one is set up).
publish: $(if $(DRY_RUN),,docker-up) ## build, self-test and push STACK-FLAVOR to REGISTRY (DRY_RUN=1: show the plan)
	@[[ -n "$(DRY_RUN)" ]] || $(IMAGE_PY) -c 'import docker' 2>/dev/null || { echo "make publish: $(IMAGE_PY) has" \
	  "no Docker SDK for Python: pip install docker (or apt-get install python3-docker, or make venv)" >&2; exit 1; }
	$(IMAGE_PY) -m tools.publish --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR) $(if $(DRY_RUN),--dry-run)

# A distribution registry on 127.0.0.1:5000 (Debian's docker-registry; the image tests publish to it).
registry-up: ## a local image registry on 127.0.0.1:5000 (the image tier publishes to it)
	@tools/registry-up.sh

test-image: venv docker-up registry-up ## system tier: build the CPU image as make publish does, run the image tests and a publish round trip
	@$(TIER_CACHE) fresh image || { $(PY) -m tools.images base && $(PY) -m tools.images build $(IMAGE_TEST_BUILD) \
	  && $(PY) -m tools.images prune && $(RUN_TESTS) image -m "image$$($(TIER_CACHE) select image)" $(SYSTEM_TESTS) && $(TIER_CACHE) record image; }

# After test-image (it needs the CPU image): the pods of bench k8s's MPIJob, TrainJob and indexed Job, started as
# their operators would start them (tests/system/test_kubernetes_pods.py); no control plane here.
test-k8s: venv docker-up ## system tier: the pods of bench k8s's manifests, started as the operators would start them
	@$(TIER_CACHE) fresh kubernetes || { $(RUN_TESTS) kubernetes -m "kubernetes$$($(TIER_CACHE) select kubernetes)" $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record kubernetes; }

# The CUDA flavour on the same debootstrapped base; its build runs the self-test (no GPU needed) with one mode per
# framework environment, and the tier's tests run the other two modes in the built image.
test-image-cuda: venv docker-up ## system tier: build the CUDA image here (no GPU needed: CUDA from PyPI wheels), run its tests
	@$(TIER_CACHE) fresh image_cuda || { $(PY) -m tools.images base && $(PY) -m tools.images build $(IMAGE_CUDA_TEST_BUILD) \
	  && $(PY) -m tools.images prune && PATH=$(APPTAINER_PATH) $(RUN_TESTS) image_cuda -m "image_cuda$$($(TIER_CACHE) select image_cuda)" $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record image_cuda; }

# The cluster's nodes are the CPU image (built here as test-image builds it) plus Slurm and munge.
cluster-up: venv docker-up ## a Slurm cluster of containers here: controller head, nodes node1 and node2 (CLUSTER_NODES=4 CLUSTER_CPUS=0.4: four nodes, 0.4 of a core each)
	$(PY) -m tools.images base
	$(PY) -m tools.images build $(IMAGE_TEST_BUILD)
	$(PY) -m tools.cluster up $(if $(CLUSTER_NODES),--nodes $(CLUSTER_NODES)) $(if $(CLUSTER_CPUS),--cpus $(CLUSTER_CPUS))

# The cluster tiers take their cluster down however they end (a failed tier left 4 nodes running).
test-cluster: venv ## system tier: multi-node runs and faults on the cluster of containers
	@$(TIER_CACHE) fresh cluster || { $(MAKE) --no-print-directory cluster-up \
	  && $(RUN_TESTS) cluster -m "cluster and not apptainer$$($(TIER_CACHE) select cluster)" $(SYSTEM_TESTS) && $(TIER_CACHE) record cluster; \
	  rc=$$?; $(PY) -m tools.cluster down >/dev/null; exit $$rc; }

# bench diagnose on the cluster made 4 nodes of 0.4 of a core each, broken on purpose; keyed by what diagnose runs.
test-diagnose: venv ## system tier: bench diagnose on the cluster made 4 nodes and broken on purpose
	@$(TIER_CACHE) fresh diagnose || { $(MAKE) --no-print-directory cluster-up CLUSTER_NODES=4 CLUSTER_CPUS=0.4 \
	  && $(RUN_TESTS) diagnose -m diagnose $(SYSTEM_TESTS) && $(TIER_CACHE) record diagnose; \
	  rc=$$?; $(PY) -m tools.cluster down >/dev/null; exit $$rc; }

cluster-down: venv ## stop and remove the cluster of containers
	$(PY) -m tools.cluster down

cluster-exec: venv ## run CMD='srun -N2 -n2 bench torch-ddp ...' on the cluster's controller, in results/cluster
	$(PY) -m tools.cluster exec -- "$$CMD"

# Kubernetes (docs/kubernetes.md): the example manifests, one per workload, as bench k8s renders them; and the
# offline check of manifests against the Kubernetes schemas and the vendored CRDs (K8S_FILES, default the examples).
K8S_IMAGE ?= registry.example.com/hvdbench:current-cuda
K8S_FILES ?= k8s/examples/*.yaml
k8s-examples: venv ## rewrite k8s/examples/ from bench k8s (K8S_IMAGE=...)
	$(VENV)/bin/bench k8s tf-horovod --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/mpijob-tf-horovod.yaml
	$(VENV)/bin/bench k8s torch-horovod --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 \
	  > k8s/examples/mpijob-torch-horovod.yaml
	$(VENV)/bin/bench k8s torch-ddp --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/trainjob-torch-ddp.yaml
	$(VENV)/bin/bench k8s tf-native --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/job-tf-native.yaml

k8s-check: venv ## check manifests offline against Kubernetes 1.34 and the vendored CRDs (K8S_FILES=...)
	$(PY) -m tools.k8s_check $(K8S_FILES)

singularity: venv ## regenerate singularity/*.def from docker/ (spython)
	$(PY) -m tools.recipes

apptainer-up: ## make apptainer (and singularity) runnable here; prints the directory for PATH
	@tools/apptainer-up.sh

sif: ## build hvdbench-STACK-FLAVOR.sif from the local Docker image (apptainer)
	PATH=$(APPTAINER_PATH) $(IMAGE_PY) -m tools.sif image --stack $(STACK) --flavor $(FLAVOR) --output $(SIF) \
	  --compression $(SIF_COMPRESSION)

sif-def: ## build it from singularity/hvdbench-STACK-FLAVOR.def instead
	PATH=$(APPTAINER_PATH) $(IMAGE_PY) -m tools.sif def --stack $(STACK) --flavor $(FLAVOR) --output $(SIF) \
	  --compression $(SIF_COMPRESSION)

sif-pull: ## pull the published image from REGISTRY into SIF, by digest (apptainer)
	PATH=$(APPTAINER_PATH) $(IMAGE_PY) -m tools.sif pull --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR) \
	  --output $(SIF) --compression $(SIF_COMPRESSION)

sif-check: ## check SIF as a cluster user takes it: size, bench env (CUDA, NCCL, Horovod), a CPU run per framework, --nv
	PATH=$(APPTAINER_PATH) $(IMAGE_PY) -m tools.sif_check $(SIF)

# After test-image (it needs the CPU image): the SIF from that image and from the definition file.
test-apptainer: venv docker-up slurm-up ## system tier: build the CPU SIFs here, run them under Apptainer and Slurm
	@$(TIER_CACHE) fresh apptainer || { PATH=$(APPTAINER_PATH) $(RUN_TESTS) apptainer \
	  -m "apptainer and not sif_pull$$($(TIER_CACHE) select apptainer)" $(SYSTEM_TESTS) && $(TIER_CACHE) record apptainer; }

# After test-image: publish the CPU image to the registry here and `make sif-pull` it back. Keyed by the pull path's
# own files (tools/tier_cache.py), not by all of bench/: the pulled SIF holds the image test-apptainer runs.
test-sif-pull: venv docker-up slurm-up registry-up ## system tier: make sif-pull from the registry here
	@$(TIER_CACHE) fresh sif_pull || { PATH=$(APPTAINER_PATH) $(RUN_TESTS) sif_pull -m sif_pull $(SYSTEM_TESTS) \
	  && $(TIER_CACHE) record sif_pull; }

slurm-up: ## start a one-node Slurm cluster here (the tests use it)
	tools/slurm-up.sh

bench-attribution: venv ## per-rank attribution of each mode at np 2, plain and with a slowed rank
	$(PY) -m tools.benchmarks.attribution_study $(ARGS)

bench-overhead: venv ## torch-ddp, tf-horovod and tf-native against their bare loops (DDP, Horovod TF, tf.distribute)
	$(PY) -m tools.benchmarks.overhead --mode torch-ddp $(ARGS)
	$(PY) -m tools.benchmarks.overhead --mode tf-horovod --image-size 32 $(ARGS)
	$(PY) -m tools.benchmarks.overhead --mode tf-native --image-size 32 $(ARGS)

bench-converge: venv ## bench converge on the digits (every distributed mode, np 1 and 2, repeated) and what evaluations cost
	$(PY) -m tools.benchmarks.converge_study $(ARGS)

bench-data-check: venv ## bench data bench against a long independent read of the same loader and shard (ARGS=...)
	$(PY) -m tools.benchmarks.data_bench_check $(ARGS)

bench-data-queue: venv ## a loader slower than training: the headline with its queue full or empty after the warm-up (ARGS=...)
	$(PY) -m tools.benchmarks.queue_settle $(ARGS)

bench-data-cost: venv ## VGG-16 and ResNet-50 at np 2 from JPEG files against synthetic, torch-ddp and tf-horovod: img/s and data wait
	$(PY) -m tools.benchmarks.data_cost $(ARGS)

# Push and pull times of an image through a registry of its own here, cold (tools/benchmarks/publish_cost.py).
bench-publish: venv docker-up registry-up ## push and pull times of an image through a registry here, from empty
	PATH=$(APPTAINER_PATH) $(PY) -m tools.benchmarks.publish_cost $(ARGS)

bench-tuning: venv ## paper against --tuned (and each of its settings alone) at np 2, and Horovod's knobs (ARGS=...)
	$(PY) -m tools.benchmarks.tuning $(ARGS)

bench-reference: venv ## tf-horovod and torch-horovod against Horovod's own synthetic benchmarks, alternated (ARGS=...)
	$(PY) -m tools.benchmarks.reference $(ARGS)

sparse-study: venv ## the Parallax study: Transformer tokens/s and bytes per step; allreduce, allgather, PS, hybrid
	tools/benchmarks/sparse_study.sh $(or $(OUT),results/sparse-study) $(ARGS)

bench-allreduce: venv ## allreduce time, algbw and busbw through every backend, up to the VGG-16 gradient
	for b in torch horovod-torch horovod-tf tf; do $(VENV)/bin/bench allreduce --backend $$b $(ARGS) || exit 1; done

verify: venv ## every distributed mode against one process on the global batch (PASS/FAIL)
	$(VENV)/bin/bench verify $(ARGS)

predict-published: venv ## the scaling model against Horovod's published efficiencies
	$(VENV)/bin/bench predict --published $(ARGS)

gpu-check-prepare: venv ## here, before a GPU check: the wheels and Horovod's sdist the GPU machine lacks, into .gpu-check/
	tools/gpu-check-prepare.sh .gpu-check $(PY)

gpu-check: ## on a GPU machine: every GPU path of bench, into OUT (default results/gpu-check): docs/gpu-check.md
	tools/gpu-check.sh $(if $(SHORT),--short) $(or $(OUT),results/gpu-check)

clean: ## remove the venv and the caches of pytest and ruff
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
