"""The tools around the bench package, in one place: what builds, publishes and checks the images, SIFs,
cluster and manifests (images, publish, cluster, sif, recipes, k8s_check), what runs the test tiers (tier_cache,
times, imports, and the set-up scripts *.sh), and the benchmarks that print this project's tables (benchmarks/).

Run each from the repository's root as a module, `python -m tools.images build ...`; tests import them as
`from tools import images`. The data they build from stays where it is read: docker/ (Dockerfiles, stacks,
patches), singularity/ (the generated definition files, the sbatch scripts), k8s/ (the CRDs, the examples).
"""
