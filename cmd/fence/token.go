package main

import (
	"fmt"
	"io"

	"github.com/fencedlease/fencedlease/pkg/fence"
)

// Exit statuses of fence token.
const (
	tokenHolder  = 0
	tokenStandby = 1
	tokenInvalid = 2
)

// tokenCommand prints the fence when this pod is the holder.
func tokenCommand(args []string, stdout, stderr io.Writer) (int, error) {
	fs, dir := newFlags("token", stderr)
	if err := parseFlags(fs, args); err != nil {
		return exitUsage, err
	}
	if fs.NArg() > 0 {
		return exitUsage, &usageError{fmt.Sprintf("token: unexpected argument %q", fs.Arg(0))}
	}
	tok, err := fence.Read(*dir)
	if err != nil {
		return tokenInvalid, fmt.Errorf("token: %w", err)
	}
	if !tok.IsHolder() {
		return tokenStandby, fmt.Errorf("token: this pod is %s of lease %q, not the holder", tok.Role, tok.Lease)
	}
	fmt.Fprintln(stdout, tok.Fence)
	return tokenHolder, nil
}
