package fencedlease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	fencingv1alpha1 "github.com/fencedlease/fencedlease/api/v1alpha1"
)

// TestPodErrorsLookAgainOnConflictsOnly: a pod that changed under a write,
// and a publication that waits for the caches, are looked at again soon
// without an error; any other failure is an error that names the
// FencedLease and the failure, also when it comes with conflicts.
func TestPodErrorsLookAgainOnConflictsOnly(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	conflict := fmt.Errorf("Standby pod ns/b for FencedLease db: %w",
		apierrors.NewConflict(pods, "b", errors.New("the object has been modified")))
	waits := fmt.Errorf("pod ns/a does not carry the label yet: %w", errLookAgain)
	forbidden := fmt.Errorf("Holder pod ns/a: %w", apierrors.NewForbidden(pods, "a", errors.New("denied")))
	for _, tc := range []struct {
		name      string
		errs      []error
		wantErr   string
		wantAgain bool
	}{
		{"none", nil, "", false},
		{"a conflict", []error{conflict}, "", true},
		{"a publication that waits", []error{waits}, "", true},
		{"both", []error{conflict, waits}, "", true},
		{"a failure among conflicts", []error{conflict, forbidden}, "publish to the pods of FencedLease ns/db: Holder pod ns/a: pods \"a\" is forbidden: denied", false},
	} {
		s := &scope{fl: &fencingv1alpha1.FencedLease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db"}}}
		err := podErrors(context.Background(), s, tc.errs)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: error %v, want none", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.wantErr)
		case tc.wantErr != "" && strings.Contains(err.Error(), "modified"):
			t.Errorf("%s: error %v also reports the conflict", tc.name, err)
		}
		if again := s.next == lookAgain; again != tc.wantAgain {
			t.Errorf("%s: again = %v, want %v", tc.name, again, tc.wantAgain)
		}
	}
}
