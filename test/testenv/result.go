package testenv

import (
	"encoding/json"
	"os"
	"testing"
)

// WriteResult writes a measurement run's result as indented JSON to the file
// the environment variable env names; nothing when it is unset.
func WriteResult(t *testing.T, env string, result any) {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		return
	}
	data, err := json.MarshalIndent(result, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
