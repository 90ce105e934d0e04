"""The report on real data: workflow/configs/shared_data.yaml (MNIST, and the LSHTC1 dry-run and 16S rRNA
gold as stand-ins for LSHTC1 and Bacteria) run end to end from ../shared/data, shrunk to minutes.

Skipped, with the reason, when ../shared/data is absent. Marked slow (about 5 minutes on 2 idle cores):
``python -m pytest -q -m slow`` runs it.
"""

import json
import re

import pandas as pd
import pytest

from conftest import REPORT_SECTIONS, SHARED_DATA
from test_workflow import ROOT, _copy_workflow, _snakemake

pytestmark = [pytest.mark.slow, pytest.mark.realdata]

FOLDERS = ("mnist", "lshtc1-dryrun", "rrna16s-gold")

# The shared-data configuration with the local paths made absolute (the run happens in a copy of
# the workflow) and smaller settings: 3,000 MNIST images, 3 CNN epochs, a lighter 16S model.
SHRINK = """
datasets:
  mnist_shared:
    files:
      train-images-idx3-ubyte.gz: {{path: {d}/mnist/train-images.idx3-ubyte.gz}}
      train-labels-idx1-ubyte.gz: {{path: {d}/mnist/train-labels.idx1-ubyte.gz}}
      t10k-images-idx3-ubyte.gz: {{path: {d}/mnist/t10k-images.idx3-ubyte.gz}}
      t10k-labels-idx1-ubyte.gz: {{path: {d}/mnist/t10k-labels.idx1-ubyte.gz}}
    split: {{subsample: 3000}}
    features: {{max_epochs: 3}}
  lshtc1_dryrun:
    files:
      train.txt: {{path: {d}/lshtc1-dryrun/Task2_Train_RDFData_Test_CrawlData__train.txt}}
      validation.txt: {{path: {d}/lshtc1-dryrun/Task2_Train_RDFData_Test_CrawlData__validation.txt}}
      test.txt: {{path: {d}/lshtc1-dryrun/Task2_Train_RDFData_Test_CrawlData__test.txt}}
      cat_hier.txt: {{path: {d}/lshtc1-dryrun/cat_hier.txt}}
  rrna16s_gold:
    files:
      rRNA16S.gold.fasta.gz: {{path: {d}/rrna16s-gold/rRNA16S.gold.fasta.gz}}
    features: {{ngram_range: [4, 4]}}
    flat: {{C: 1.0, parts: 2}}
    hf: {{C: 1.0}}
"""


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    for folder in FOLDERS:
        if not (SHARED_DATA / folder).is_dir():
            pytest.skip(f"needs ../shared/data/{folder} (real public data, see its README); absent")
    workdir = _copy_workflow(tmp_path_factory.mktemp("shared"))
    (workdir / "shrink.yaml").write_text(SHRINK.format(d=SHARED_DATA))
    result = _snakemake(
        "--cores", "2", "--configfile", str(ROOT / "workflow/configs/shared_data.yaml"), "shrink.yaml", cwd=workdir
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return workdir


def test_the_shared_data_report_has_every_section(shared_run):
    results = shared_run / "results"
    html = (results / "report.html").read_text()
    for section in REPORT_SECTIONS:
        assert f'<section id="{section}">' in html, section
    status = pd.read_csv(results / "tables/dataset_status.csv", keep_default_na=False).set_index("dataset")
    for name in ("mnist_shared", "lshtc1_dryrun", "rrna16s_gold"):
        assert status.loc[name, "status"] == "run"
    assert status.loc["lshtc1_dryrun", "relation"] == status.loc["rrna16s_gold", "relation"] == "stand-in"
    # every other dataset of config.yaml is in the status file, not run, with its reason; the page lists
    # them on its one "Not in this run" line (a row only for the run's datasets)
    assert status.loc["voc2006", "status"] == "not run: not in run"
    assert status.loc["dbpedia", "status"] == "not run: not in run"
    assert "detail" in status.columns and "data/bacteria/downloads/" in status.loc["bacteria", "detail"]
    assert re.findall(r'<tr data-dataset="([^"]*)" data-status=', html) == ["mnist_shared", "lshtc1_dryrun", "rrna16s_gold"]
    assert re.search(r"Not in this run \(\d+\):</strong>.*<code>dbpedia</code>.*<code>bacteria</code><sup>\*</sup>", html, re.S)
    # MNIST's Table 2 row is the paper's; its panel (a) is drawn from the real test images
    t1 = pd.read_csv(results / "tables/table2_vs_paper.csv", keep_default_na=False)
    mnist = t1[t1.dataset == "mnist_shared"].iloc[0]
    assert (int(mnist.K), int(mnist.D)) == (int(mnist.K_paper), int(mnist.D_paper)) == (10, 32)
    entropy = json.loads((results / "illustrations/entropy.json").read_text())
    assert entropy["status"] == "ok" and entropy["dataset"] == "mnist_shared" and len(entropy["records"]) == 3
    assert 'alt="illustration entropy from mnist_shared"' in html
    # Table 4 has both stand-ins with all four algorithms, each beside the paper's row
    t4 = pd.read_csv(results / "tables/table4_vs_paper.csv")
    for name, paper in (("lshtc1_dryrun", "LSHTC1"), ("rrna16s_gold", "Bacteria")):
        rows = t4[t4.dataset == name]
        assert sorted(set(rows.algorithm)) == ["Full", "Full_svbop", "HF_c", "HF_p", "HSG"]
        assert (rows.paper_dataset == paper).all()
        with_paper = rows[rows.t_test_ms_paper.notna()]
        assert set(with_paper.algorithm) == ({"Full", "HSG", "HF_p", "HF_c"})
    claims = json.loads((results / "tables/claims.json").read_text())
    assert len(claims) == 5 and all(c["verdict"] != "not testable" for c in claims)
