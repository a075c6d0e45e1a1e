"""``rose demo`` runs offline from the embedded assets and prints both AUROCs."""

from roseood.cli import main


def test_demo_runs_from_embedded_assets(capsys, monkeypatch):
    monkeypatch.delenv("ROSEOOD_DATA", raising=False)
    assert main(["demo", "--fit-samples", "200", "--test-samples", "100"]) == 0
    out = capsys.readouterr().out
    assert "NLL:" in out and "ROSE-EKFAC:" in out
