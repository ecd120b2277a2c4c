package main

// providerVersion is the provider's release pinned in go.mod (checked by version_test.go).
const providerVersion = "v0.21.0"
