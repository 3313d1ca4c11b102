"""The live scheduler service: YTsaurus HTTP API v4 subset, a virtual Cypress and the persistent store."""
