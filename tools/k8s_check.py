#!/usr/bin/env python3
"""Check Kubernetes manifests offline, as the API server of a stated version and the operators' CRDs would.

    python -m tools.k8s_check k8s/examples/*.yaml      # or: bench k8s ... | python -m tools.k8s_check -

* Built-in kinds (Job, Service, ...): the Kubernetes JSON schemas of KUBERNETES (kubernetes-validate, strict:
  a field the API does not know is an error, as `kubectl apply` with its default strict field validation).
* Custom resources (MPIJob, TrainJob): the openAPIV3Schema of the CRD vendored in k8s/crds/ (README.md there
  says from which release), made strict the way the API server prunes (an unknown field is an error unless the
  schema preserves unknown fields), plus the pod templates they embed against the Kubernetes PodTemplateSpec.
Exit 1 with one line per problem; 0 when every document passes; 2, in one line, where a validator it needs is not
installed (jsonschema, kubernetes-validate, PyYAML: the checkout's dev venv has them).
"""

from __future__ import annotations

import argparse
import copy
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:  # the checkout's dev venv has them (make venv); bench's own install does not need them
    import jsonschema
    import kubernetes_validate
    import yaml
except ImportError as exc:
    MISSING: str | None = exc.name
else:
    MISSING = None
NEEDS = "pip install 'jsonschema>=4' 'kubernetes-validate>=1.34' pyyaml"

KUBERNETES = "1.34"  # the Kubernetes version the manifests are checked against
CRDS = Path(__file__).resolve().parents[1] / "k8s" / "crds"
CRD_FILES = {("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org_mpijobs.yaml",
             ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml"}


def strict(schema: Any) -> Any:
    """An OpenAPI v3 schema where an object that lists its properties takes no others (unless it says
    x-kubernetes-preserve-unknown-fields): what the API server's pruning would drop is an error here."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def crd_schema(api_version: str, kind: str) -> dict[str, Any]:
    crd = yaml.safe_load((CRDS / CRD_FILES[api_version, kind]).read_text())
    version = api_version.split("/")[1]
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            schema = strict(copy.deepcopy(served["schema"]["openAPIV3Schema"]))
            # metadata is the API server's (ObjectMeta), not the CRD's
            schema["properties"]["metadata"] = {"type": "object"}
            return schema
    raise KeyError(f"{kind} {api_version} is not served by {CRD_FILES[api_version, kind]}")


def pod_templates(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, template) of every full pod template a custom resource embeds."""
    if doc["kind"] == "MPIJob":
        for role, spec in doc["spec"].get("mpiReplicaSpecs", {}).items():
            yield f"spec.mpiReplicaSpecs.{role}.template", spec.get("template", {})


def problems(doc: Any, where: str) -> list[str]:
    if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
        return [f"{where}: not a Kubernetes object (no kind and apiVersion)"]
    name = f"{where}: {doc['kind']} {doc.get('metadata', {}).get('name', '?')}"
    key = (doc["apiVersion"], doc["kind"])
    found = []
    if key in CRD_FILES:
        validator = jsonschema.Draft7Validator(crd_schema(*key))
        found += [f"{name}: {'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
                  for e in validator.iter_errors(doc)]
        for path, template in pod_templates(doc):
            found += [f"{name}: {path}: {p}" for p in builtin_problems(
                {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": template})]
    else:
        found += [f"{name}: {p}" for p in builtin_problems(doc)]
    return found


def builtin_problems(doc: dict[str, Any]) -> list[str]:
    try:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'.'.join(map(str, exc.path)) or '(top)'}: {exc.message} (Kubernetes {KUBERNETES})"]
    except kubernetes_validate.SchemaNotFoundError:
        return [f"Kubernetes {KUBERNETES} has no {doc['kind']} in {doc['apiVersion']}"]
    return []


def check_text(text: str, where: str) -> list[str]:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        return [f"{where}: not YAML ({exc})"]
    if not docs:
        return [f"{where}: no documents"]
    return [p for i, doc in enumerate(docs) for p in problems(doc, f"{where}[{i}]")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="manifest files; - reads standard input")
    args = parser.parse_args()
    if MISSING:
        print(f"error: k8s-check needs the Python module {MISSING}, not installed for {sys.executable} (the "
              f"checkout's venv has it: make venv; or {NEEDS})", file=sys.stderr)
        return 2
    found = []
    for name in args.files:
        try:
            text = sys.stdin.read() if name == "-" else Path(name).read_text()
        except OSError as exc:
            found.append(f"{name}: {exc.strerror or exc}")
            continue
        found += check_text(text, name)
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    if not found:
        print(f"k8s-check: {len(args.files)} file(s) valid against Kubernetes {KUBERNETES} and the vendored CRDs")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
