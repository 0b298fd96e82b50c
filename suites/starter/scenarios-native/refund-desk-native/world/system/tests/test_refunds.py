"""Run from system/:  python3 -m unittest discover -s tests"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import refunds  # noqa: E402


def req(**kw):
    r = {
        "request_id": "R-0000001", "amount": 40.0, "category": "home", "reason": "changed_mind",
        "photo_attached": False, "carrier_status": "delivered", "days_since_delivery": 3,
        "account_age_days": 800, "orders_12m": 6, "returns_12m": 1, "prior_chargebacks": 0,
        "loyalty_tier": "none", "payment_method": "card", "ship_to": "A-0000000000",
        "ship_address_accounts_90d": 1,
    }
    r.update(kw)
    return r


class DecideTest(unittest.TestCase):
    def test_small_refund_approved(self):
        self.assertEqual(refunds.decide(req()), "approve")

    def test_hard_cap(self):
        self.assertEqual(refunds.decide(req(amount=812.0, loyalty_tier="gold")), "review")

    def test_carrier_not_confirmed(self):
        self.assertEqual(refunds.decide(req(carrier_status="in_transit", days_since_delivery=None)), "review")

    def test_chargebacks(self):
        self.assertEqual(refunds.decide(req(prior_chargebacks=2)), "deny")

    def test_documented_claim(self):
        self.assertEqual(refunds.decide(req(amount=240.0, reason="damaged", photo_attached=True)), "approve")

    def test_undocumented_goes_to_queue(self):
        self.assertEqual(refunds.decide(req(amount=95.0)), "review")


if __name__ == "__main__":
    unittest.main()
