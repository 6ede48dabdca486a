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
# The image tests build the CPU flavour exactly as `make publish STACK=current FLAVOR=cpu` does (the stack's base, or
# the debootstrapped bookworm where no registry serves it; PyTorch's CPU wheel staged by docker/images.py).
IMAGE_TEST_BUILD ?= --stack current --flavor cpu

.PHONY: help venv bench test test-unit test-framework test-multiproc test-system slurm-test sif-pull-test test-times test-fast lint bench-attribution bench-overhead bench-publish bench-reference bench-allreduce sparse-study verify predict-published image images image-test image-cuda-test cluster-up cluster-test diagnose-test k8s-test cluster-down cluster-exec docker-up k8s-examples k8s-check singularity apptainer-up sif sif-def sif-pull publish registry-up apptainer-test slurm-up clean
SIF ?= hvdbench-$(STACK)-$(FLAVOR).sif
# apptainer or singularity: one on PATH, else the one scripts/apptainer-up.sh sets up.
APPTAINER_PATH = $$(scripts/apptainer-up.sh):$$PATH
REGISTRY ?= ghcr.io/hvdbench
help:
	@echo "make bench          set up (first time) and run a benchmark that fits this machine (MODE=$(MODE) ARGS=...)"
	@echo "make test           set up (first time) and run every tier: unit, framework, multiproc, system"
	@echo "make test-unit      the unit tier: in process, no framework, no subprocess (under a minute)"
	@echo "make test-fast      the unit and framework tiers (a few minutes)"
	@echo "make test-multiproc real multi-process runs under every launcher, endings and faults"
	@echo "make test-system    Slurm, the CPU and CUDA images, Kubernetes pods, the cluster of containers, the SIFs"
	@echo "make test-times     each tier's wall time and the 20 slowest tests of the last make test"
	@echo "make lint           ruff on the package and tests, bash -n on scripts"
	@echo "make bench-overhead torch-ddp, tf-horovod and tf-native vs their bare loops (DDP, Horovod TF, tf.distribute)"
	@echo "make bench-reference tf-horovod and torch-horovod vs Horovod's own synthetic benchmarks, alternated (ARGS=...)"
	@echo "make sparse-study   the Parallax study: Transformer tokens/s and bytes per step; allreduce, allgather, PS, hybrid"
	@echo "make bench-allreduce allreduce time/algbw/busbw through every backend, up to the VGG-16 gradient"
	@echo "make bench-attribution  per-rank attribution of each mode at np 2, plain and with a slowed rank"
	@echo "make bench-publish  push and pull times of an image through a registry here, from empty (benchmarks/publish.py)"
	@echo "make verify         every distributed mode against one process on the global batch (PASS/FAIL)"
	@echo "make predict-published  the scaling model against Horovod's published efficiencies"
	@echo "make venv           the venv with torch, tensorflow-cpu, tf-keras and patched Horovod"
	@echo "make image          build hvdbench:\$$STACK-\$$FLAVOR (default current-cuda, also tagged hvdbench:latest)"
	@echo "make images         build every stack x flavour"
	@echo "make image-test     start a Docker engine, build the CPU image here, run the image tests"
	@echo "make image-cuda-test build the CUDA image here (no GPU needed: CUDA from PyPI wheels), run its tests"
	@echo "make cluster-up     a Slurm cluster of containers here: controller head, nodes node1 and node2"
	@echo "                    (CLUSTER_NODES=4 CLUSTER_CPUS=0.4: four nodes, 0.4 of a core each)"
	@echo "make cluster-exec   run CMD='srun -N2 -n2 bench torch-ddp ...' on its controller, in results/cluster"
	@echo "make cluster-down   stop and remove it"
	@echo "make singularity    regenerate singularity/*.def from docker/ (spython)"
	@echo "make apptainer-up   make apptainer (and singularity) runnable here; prints the directory for PATH"
	@echo "make sif            build hvdbench-\$$STACK-\$$FLAVOR.sif from the local Docker image (apptainer)"
	@echo "make sif-def        build it from singularity/hvdbench-\$$STACK-\$$FLAVOR.def instead"
	@echo "make apptainer-test set up apptainer, build the CPU SIFs here, run the apptainer tests"
	@echo "make sif-pull       pull the published image from \$$REGISTRY into \$$SIF, by digest (apptainer)"
	@echo "make publish        build, self-test and push \$$STACK-\$$FLAVOR to \$$REGISTRY (DRY_RUN=1: show the plan)"
	@echo "make registry-up    a local image registry on 127.0.0.1:5000 (the image tests publish to it)"
	@echo "make slurm-up       start a one-node Slurm cluster here (tests use it)"

venv: $(STAMP)
$(STAMP): pyproject.toml requirements/venv.txt requirements/hybrid.txt scripts/setup.sh docker/build-horovod.sh $(wildcard docker/horovod/*.patch)
	scripts/setup.sh $(VENV) $(PYTHON)
	touch $(STAMP)

bench: venv
	$(VENV)/bin/bench $(MODE) $(ARGS)

# The tiers (docs/development.md), cheapest first; tests/conftest.py gives every test exactly one.
TEST_TIMES ?= results/test-times
export HVDBENCH_TEST_TIMES := $(TEST_TIMES)
RUN_TESTS = scripts/run-tests.sh $(PY)
# A system tier that passed on exactly the same inputs is not run again (scripts/tier-cache.py; HVDBENCH_RERUN=1).
TIER_CACHE = $(PY) scripts/tier-cache.py
test: venv
	@rm -rf $(TEST_TIMES); rc=0; start=$$(date +%s); \
	for tier in test-unit test-framework test-multiproc test-system; do \
	  $(MAKE) --no-print-directory $$tier || { rc=1; break; }; done; \
	mkdir -p $(TEST_TIMES); echo $$(( $$(date +%s) - start )) > $(TEST_TIMES)/make-test.total; \
	$(PY) scripts/test-times.py $(TEST_TIMES); exit $$rc

test-unit: venv
	$(RUN_TESTS) unit -m unit $(PYTEST_ARGS)

test-framework: venv
	$(RUN_TESTS) framework -m "framework and not multiproc and not system" $(PYTEST_ARGS)

test-multiproc: venv
	$(RUN_TESTS) multiproc -m "multiproc and not system" $(PYTEST_ARGS)

# Slurm, then the images, the cluster of containers, the CUDA image and the SIFs: each rebuilds only what changed,
# and each runs only when its inputs changed since it last passed here.
test-system: venv
	$(MAKE) --no-print-directory slurm-test
	$(MAKE) --no-print-directory image-test
	$(MAKE) --no-print-directory k8s-test
	$(MAKE) --no-print-directory cluster-test
	$(MAKE) --no-print-directory diagnose-test
	$(MAKE) --no-print-directory image-cuda-test
	$(MAKE) --no-print-directory apptainer-test
	$(MAKE) --no-print-directory sif-pull-test

# The quick check before a commit: the unit and framework tiers.
test-fast: test-unit test-framework

test-times: venv
	$(PY) scripts/test-times.py $(TEST_TIMES)

slurm-test: venv slurm-up
	@$(TIER_CACHE) fresh slurm || { $(RUN_TESTS) slurm -m "slurm and not apptainer and not cluster" $(PYTEST_ARGS) \
	  && $(TIER_CACHE) record slurm; }

lint: venv
	$(VENV)/bin/ruff check bench tests benchmarks docker/images.py docker/cluster.py singularity/generate.py singularity/sif.py
	$(VENV)/bin/hadolint docker/Dockerfile docker/Dockerfile.cuda docker/cluster/Dockerfile
	bash -n scripts/*.sh docker/*.sh docker/cluster/*.sh .ci/run

docker-up:
	scripts/docker-up.sh

image: venv docker-up
	$(PY) docker/images.py build --stack $(STACK) --flavor $(FLAVOR)

images: venv docker-up
	for s in $$($(PY) docker/images.py stacks); do for f in cpu cuda; do \
	  $(PY) docker/images.py build --stack $$s --flavor $$f || exit 1; done; done

# Build, self-test and push to REGISTRY (docker/publish.py; the release workflow runs this). DRY_RUN=1 shows the
# Dockerfile, build args, tags and labels and does nothing. STACK and FLAVOR take comma-separated lists or all.
publish: venv $(if $(DRY_RUN),,docker-up)
	$(PY) docker/publish.py --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR) $(if $(DRY_RUN),--dry-run)

# A distribution registry on 127.0.0.1:5000 (Debian's docker-registry; the image tests publish to it).
registry-up:
	@scripts/registry-up.sh

image-test: venv docker-up registry-up
	@$(TIER_CACHE) fresh image || { $(PY) docker/images.py base && $(PY) docker/images.py build $(IMAGE_TEST_BUILD) \
	  && $(RUN_TESTS) image -m image $(PYTEST_ARGS) && $(TIER_CACHE) record image; }

# After image-test (it needs the CPU image): the pods of bench k8s's MPIJob, TrainJob and indexed Job, started as
# their operators would start them (tests/test_kubernetes_pods.py); no control plane here.
k8s-test: venv docker-up
	@$(TIER_CACHE) fresh kubernetes || { $(RUN_TESTS) kubernetes -m kubernetes $(PYTEST_ARGS) \
	  && $(TIER_CACHE) record kubernetes; }

# The CUDA flavour on the same debootstrapped base; its build runs the self-test (no GPU needed) with one mode per
# framework environment, and the tier's tests run the other two modes in the built image.
image-cuda-test: venv docker-up
	@$(TIER_CACHE) fresh image_cuda || { $(PY) docker/images.py base \
	  && $(PY) docker/images.py build --stack current --flavor cuda --base hvdbench-base:bookworm \
	     --self-test-modes "torch-ddp tf-horovod" \
	  && $(RUN_TESTS) image_cuda -m image_cuda $(PYTEST_ARGS) && $(TIER_CACHE) record image_cuda; }

# The cluster's nodes are the CPU image (built here as image-test builds it) plus Slurm and munge.
cluster-up: venv docker-up
	$(PY) docker/images.py base
	$(PY) docker/images.py build $(IMAGE_TEST_BUILD)
	$(PY) docker/cluster.py up $(if $(CLUSTER_NODES),--nodes $(CLUSTER_NODES)) $(if $(CLUSTER_CPUS),--cpus $(CLUSTER_CPUS))

cluster-test: venv
	@$(TIER_CACHE) fresh cluster || { $(MAKE) --no-print-directory cluster-up \
	  && $(RUN_TESTS) cluster -m "cluster and not apptainer" $(PYTEST_ARGS) && $(TIER_CACHE) record cluster; }

# bench diagnose on the cluster made 4 nodes of 0.4 of a core each, broken on purpose; keyed by what diagnose runs.
diagnose-test: venv
	@$(TIER_CACHE) fresh diagnose || { $(MAKE) --no-print-directory cluster-up CLUSTER_NODES=4 CLUSTER_CPUS=0.4 \
	  && $(RUN_TESTS) diagnose -m diagnose $(PYTEST_ARGS) && $(TIER_CACHE) record diagnose; }

cluster-down: venv
	$(PY) docker/cluster.py down

cluster-exec: venv
	$(PY) docker/cluster.py exec -- "$$CMD"

# Kubernetes (docs/kubernetes.md): the example manifests, one per workload, as bench k8s renders them; and the
# offline check of manifests against the Kubernetes schemas and the vendored CRDs (K8S_FILES, default the examples).
K8S_IMAGE ?= registry.example.com/hvdbench:current-cuda
K8S_FILES ?= k8s/examples/*.yaml
k8s-examples: venv
	$(VENV)/bin/bench k8s tf-horovod --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/mpijob-tf-horovod.yaml
	$(VENV)/bin/bench k8s torch-horovod --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 \
	  > k8s/examples/mpijob-torch-horovod.yaml
	$(VENV)/bin/bench k8s torch-ddp --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/trainjob-torch-ddp.yaml
	$(VENV)/bin/bench k8s tf-native --image $(K8S_IMAGE) --nodes 2 --gpus-per-node 8 > k8s/examples/job-tf-native.yaml

k8s-check: venv
	$(PY) k8s/validate.py $(K8S_FILES)

singularity: venv
	$(PY) singularity/generate.py

apptainer-up:
	@scripts/apptainer-up.sh

sif: venv
	PATH=$(APPTAINER_PATH) $(PY) singularity/sif.py image --stack $(STACK) --flavor $(FLAVOR) --output $(SIF)

sif-def: venv
	PATH=$(APPTAINER_PATH) $(PY) singularity/sif.py def --stack $(STACK) --flavor $(FLAVOR) --output $(SIF)

sif-pull: venv
	PATH=$(APPTAINER_PATH) $(PY) singularity/sif.py pull --registry $(REGISTRY) --stack $(STACK) --flavor $(FLAVOR) \
	  --output $(SIF)

# After image-test (it needs the CPU image): the SIF from that image and from the definition file.
apptainer-test: venv docker-up slurm-up
	@$(TIER_CACHE) fresh apptainer || { PATH=$(APPTAINER_PATH) $(RUN_TESTS) apptainer \
	  -m "apptainer and not sif_pull" $(PYTEST_ARGS) && $(TIER_CACHE) record apptainer; }

# After image-test: publish the CPU image to the registry here and `make sif-pull` it back. Keyed by the pull path's
# own files (scripts/tier-cache.py), not by all of bench/: the pulled SIF holds the image apptainer-test runs.
sif-pull-test: venv docker-up slurm-up registry-up
	@$(TIER_CACHE) fresh sif_pull || { PATH=$(APPTAINER_PATH) $(RUN_TESTS) sif_pull -m sif_pull $(PYTEST_ARGS) \
	  && $(TIER_CACHE) record sif_pull; }

slurm-up:
	scripts/slurm-up.sh

bench-attribution: venv
	$(PY) benchmarks/attribution.py $(ARGS)

bench-overhead: venv
	$(PY) benchmarks/overhead.py --mode torch-ddp $(ARGS)
	$(PY) benchmarks/overhead.py --mode tf-horovod --image-size 32 $(ARGS)
	$(PY) benchmarks/overhead.py --mode tf-native --image-size 32 $(ARGS)

# Push and pull times of an image through a registry of its own here, cold (benchmarks/publish.py).
bench-publish: venv docker-up registry-up
	PATH=$(APPTAINER_PATH) $(PY) benchmarks/publish.py $(ARGS)

bench-reference: venv
	$(PY) benchmarks/reference.py $(ARGS)

sparse-study: venv
	benchmarks/sparse_study.sh $(or $(OUT),results/sparse-study) $(ARGS)

bench-allreduce: venv
	for b in torch horovod-torch horovod-tf tf; do $(VENV)/bin/bench allreduce --backend $$b $(ARGS) || exit 1; done

verify: venv
	$(VENV)/bin/bench verify $(ARGS)

predict-published: venv
	$(VENV)/bin/bench predict --published $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
