package scaleguard_test

import (
	"testing"

	"github.com/fencedlease/fencedlease/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }
