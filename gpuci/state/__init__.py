"""The state ledger: what each test and test file left behind in its interpreter."""
