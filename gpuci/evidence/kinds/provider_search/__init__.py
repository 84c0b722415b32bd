"""The provider search, a kind of evidence: which earlier test or collected file a test that
depends on others needs (its kind as the engine lists it: `kind`)."""
