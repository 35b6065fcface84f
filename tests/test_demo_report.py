"""The demo's table says that a rerun moves the numbers, and by how much across seeds."""

from dpmtv.demo import RERUN_NOTE, _group_cells


def test_cells_carry_the_spread_over_seeds_and_the_note_says_why():
    row = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": 0.1, "per_seed": [0.45, 0.5, 0.55]}
    single = {"method": "dp-mtv", "epsilon": 1.0, "accuracy": 0.5, "ci95": None, "per_seed": [0.5]}
    (cell,) = _group_cells({"seen": [row]}, row)
    assert cell == "0.500 ± 0.100 [0.450–0.550]"
    (cell,) = _group_cells({"seen": [single]}, single)
    assert cell == "0.500"  # one seed: no spread to show
    assert "fresh partition" in RERUN_NOTE and "fresh noise" in RERUN_NOTE
