"""docs/performance.md's measured tables are generated from bench/results/*.json
(``python -m bench.report``): a stale block fails here, as a stale register map fails
tests/test_regmap.py."""

import json

from bench import report
from bench.run import benchmark_names

DOCUMENT = {
    "benchmark": "array", "date": "2026-11-28T08:00:00+00:00",
    "machine": {"cpus": 2, "python": "3.11.7", "load": 3.25}, "seed": 7,
    "metrics": [{"name": "cycles", "value": 1234, "unit": "cycles"},
                {"name": "ratio", "value": 0.5, "unit": "fraction", "peer": "ideal",
                 "peer_value": 0.75, "note": "a | b"}],
}


def _page(body="old\n"):
    return (f"# P\n\n<!-- results: array -->\n{body}<!-- end results: array -->\n\n"
            f"<!-- results: twin -->\nkept\n<!-- end results: twin -->\n")


def test_a_block_is_rewritten_from_its_file_and_a_missing_file_leaves_it(tmp_path):
    (tmp_path / "array.json").write_text(json.dumps(DOCUMENT))
    text, changed = report.generate(_page(), tmp_path)
    assert changed == ["array"]
    assert "Measured 2026-11-28 08:00:00 UTC by `tessera bench array` on 2 CPUs, load 3.2" \
        in text
    assert "Context: seed: 7." in text
    assert "| cycles | 1,234 | cycles |  |  |" in text
    assert "| ratio | 0.5 | fraction | ideal: 0.75 | a \\| b |" in text
    assert "<!-- results: twin -->\nkept\n" in text  # no twin.json: left as it was
    assert report.generate(text, tmp_path) == (text, [])  # generated once, then stable


def test_check_fails_on_a_stale_block_and_names_it(tmp_path, capsys):
    (tmp_path / "array.json").write_text(json.dumps(DOCUMENT))
    doc = tmp_path / "performance.md"
    doc.write_text(_page())
    args = ["--doc", str(doc), "--results", str(tmp_path)]
    assert report.main([*args, "--check"]) == 1
    assert "the block 'array' is stale" in capsys.readouterr().out
    assert report.main(args) == 0
    assert report.main([*args, "--check"]) == 0


def test_the_performance_page_is_current_against_the_results_here():
    """Every block names a benchmark that writes it, and none is stale against the results
    present in bench/results/ (absent files are not checked: they are not committed)."""
    text = report.DOC.read_text()
    names = [match["name"] for match in report.BLOCK.finditer(text)]
    assert names, "docs/performance.md has no generated blocks"
    writers = set(benchmark_names()) | set(report.COMMANDS)
    assert set(names) <= writers, sorted(set(names) - writers)
    _, stale = report.generate(text)
    assert stale == [], f"stale blocks {stale}: run `python -m bench.report`"
