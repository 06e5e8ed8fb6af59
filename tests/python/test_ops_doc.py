"""docs/ops.md is generated from the kernel registry; it must list every op Kiln registers, so a new
kernel without `make conformance` (which regenerates the page) fails here."""
import json
import re

from kiln_cli import REPO, run_kiln


def test_ops_doc_lists_every_registered_op():
    proc = run_kiln("ops", "--json")
    assert proc.returncode == 0, proc.stderr
    registered = {(e["domain"], e["op"]) for e in json.loads(proc.stdout)}
    doc = (REPO / "docs" / "ops.md").read_text()
    doc = doc.split("## Ops Kiln runs", 1)[1].split("\n## ", 1)[0]  # the table of ops only
    documented = {(domain, op) for op, domain in re.findall(r"^\| (\w+) \| ([\w.]+) \|", doc, flags=re.M)}
    documented.discard(("domain", "op"))  # the header row
    missing = sorted(registered - documented)
    assert not missing, f"docs/ops.md lacks {missing}: run `make conformance` to regenerate it"
    stale = sorted(documented - registered)
    assert not stale, f"docs/ops.md lists ops Kiln no longer registers: {stale}"


def test_ops_command_lists_core_kernels():
    proc = run_kiln("ops")
    assert proc.returncode == 0
    for op in ("Conv", "MatMul", "Gemm", "Relu", "Reshape", "Softmax", "BatchNormalization"):
        assert re.search(rf"^{op}\s+ai\.onnx\s", proc.stdout, flags=re.M), op
