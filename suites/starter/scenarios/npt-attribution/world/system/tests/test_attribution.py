"""Smoke tests: python3 -m unittest discover -s tests  (from system/)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from attribution import attribute  # noqa: E402


def line(**kw):
    base = {"line_id": "DDR-R-07-20240301-01", "report_date": "2024-03-01", "rig_id": "R-07",
            "event_ref": "NPT-24-00001", "code": "RR", "start": "10:00", "end": "13:00", "hours": "3.00",
            "cont": "N", "description": "test"}
    base.update(kw)
    return base


class AttributionTest(unittest.TestCase):
    def test_rig_repair_is_contractor(self):
        r = attribute([line()])[0]
        self.assertEqual(r["attribution"], "contractor")
        self.assertAlmostEqual(r["claim_usd"], 3 * 41500 / 24, places=2)

    def test_weather_is_excluded(self):
        r = attribute([line(code="WOW")])[0]
        self.assertEqual(r["attribution"], "excluded")
        self.assertEqual(r["claim_usd"], 0.0)

    def test_hole_problems_are_ours(self):
        self.assertEqual(attribute([line(code="HOLE")])[0]["attribution"], "operator")


if __name__ == "__main__":
    unittest.main()
