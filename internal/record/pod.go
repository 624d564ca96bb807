package record

// Pod is what a candidate pod carries of one FencedLease: the label that
// makes it a candidate, and the annotations its token files come from.
type Pod struct {
	// Labelled says that the pod carries LabelLease with the FencedLease's
	// name.
	Labelled bool
	// Lease, Role and Fence are the annotations of the token files. Fence
	// is 0 when empty and -1 when it does not parse.
	Lease string
	Role  string
	Fence int64
	// Grant is the fence of the grant the pod was last marked for.
	Grant int64
	// Foreign says that the annotations name another FencedLease: the
	// pod's token files are that one's.
	Foreign bool
}

// ParsePod reads what a pod carries of the FencedLease lease. A pod whose
// label and lease annotation name another FencedLease, or none, carries
// nothing of this one; a pod with this one's label whose annotations name
// another carries only the label (the annotations, its token files, are the
// other one's). Either is Foreign when the annotations name another.
func ParsePod(labels, annotations map[string]string, lease string) Pod {
	named := annotations[AnnotationLease]
	if labels[LabelLease] != lease && named != lease {
		return Pod{Foreign: named != ""}
	}
	if named != "" && named != lease {
		return Pod{Labelled: true, Foreign: true}
	}
	p := Pod{
		Labelled: labels[LabelLease] == lease,
		Lease:    annotations[AnnotationLease],
		Role:     annotations[AnnotationRole],
		Grant:    FenceOf(annotations[AnnotationGrant]),
	}
	if raw := annotations[AnnotationFence]; raw != "" {
		if p.Fence = FenceOf(raw); p.Fence == 0 {
			p.Fence = -1
		}
	}
	return p
}

// Published reads the FencedLease and fence a pod is published as the
// holder of, whatever FencedLease it names; "" when it is no holder, and
// fence -1 when its fence does not parse.
func Published(annotations map[string]string) (lease string, fence int64) {
	if annotations[AnnotationRole] != RoleHolder || annotations[AnnotationFence] == "" {
		return "", 0
	}
	if n := FenceOf(annotations[AnnotationFence]); n > 0 {
		return annotations[AnnotationLease], n
	}
	return annotations[AnnotationLease], -1
}

// IsHolder says whether the pod is published as the holder: role holder
// with a fence.
func (p Pod) IsHolder() bool { return p.Role == RoleHolder && p.Fence != 0 }

// PodAnnotations are the annotations of a pod that the operator writes.
var PodAnnotations = []string{AnnotationFence, AnnotationRole, AnnotationLease, AnnotationGrant}

// Apply writes the publication p into a pod's annotations, which must not
// be nil: the FencedLease, the role and the fence ("" when 0: a standby),
// and the grant the pod is marked for when it is not 0 (left as it is
// otherwise). The token files are these annotations as written.
func (p Pod) Apply(annotations map[string]string) {
	annotations[AnnotationLease], annotations[AnnotationRole], annotations[AnnotationFence] = p.Lease, p.Role, ""
	if p.Fence != 0 {
		annotations[AnnotationFence] = FormatFence(p.Fence)
	}
	if p.Grant != 0 {
		annotations[AnnotationGrant] = FormatFence(p.Grant)
	}
}

// PodMergePatch is the metadata of a JSON merge patch that writes a pod's
// part of one FencedLease: the label that makes it a candidate of lease
// (labelled; nil removes it), and, when publish is set, the publication
// (Pod.Apply). Without labelled, every annotation of PodAnnotations is
// removed too.
func PodMergePatch(lease string, labelled bool, publish *Pod) map[string]any {
	if !labelled {
		ann := map[string]any{}
		for _, k := range PodAnnotations {
			ann[k] = nil
		}
		return map[string]any{"labels": map[string]any{LabelLease: nil}, "annotations": ann}
	}
	md := map[string]any{"labels": map[string]any{LabelLease: lease}}
	if publish != nil {
		written := map[string]string{}
		publish.Apply(written)
		ann := map[string]any{}
		for k, v := range written {
			ann[k] = v
		}
		md["annotations"] = ann
	}
	return md
}
