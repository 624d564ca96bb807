package apistatus

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// OtherUID tells whether a write failed because it named the UID of an
// object that the name no longer stands for: metadata.uid is immutable, so
// the API server answers such a patch or update as invalid, with the cause
// on that field. Any other invalid write is not.
func OtherUID(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
