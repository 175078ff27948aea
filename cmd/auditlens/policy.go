package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/auditlens/auditlens/detect"
	"github.com/auditlens/auditlens/detect/detectors"
	"github.com/auditlens/auditlens/policy"
)

// maxPolicyBytes bounds the policy file read: real ones are a few KiB.
const maxPolicyBytes = 4 << 20

// runPolicy dispatches the policy subcommands.
func runPolicy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub := ""
	if len(args) > 0 {
		sub = args[0]
	}
	switch sub {
	case "check":
		return runPolicyCheck(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		policyUsage(stdout)
		return nil
	case "":
		policyUsage(stderr)
		return fmt.Errorf("%w: name a subcommand: check", errUsage)
	}
	policyUsage(stderr)
	return fmt.Errorf("%w: unknown subcommand %q: want check", errUsage, sub)
}

func policyUsage(w io.Writer) {
	fmt.Fprint(w, `Usage: auditlens policy check [--format text|json] FILE

Subcommands:
  check   tell whether an audit policy lets each detector see what it reads
`)
}

const policyCheckHelp = `Evaluates an audit.k8s.io/v1 Policy (the file given to kube-apiserver's
--audit-policy-file; v1beta1 is accepted with a warning) the way kube-apiserver does (the first
matching rule decides; a rule's omitStages add to the policy's) against the requests each
detector must see:

%s
For each it prints ok, weakened (some clients unseen, or possible false alarms) or blinded,
the rule that hides each missing request, and a rule to insert that fixes it. Level Metadata is
enough: a watch's resourceVersion is in its requestURI.

Exit status: 0 when no detector is blinded, 1 when one is, 2 when the file is not a policy
kube-apiserver would load (the error names the line or field).
`

// runPolicyCheck checks an audit policy file against the detectors'
// needs. Exit status 1 when a detector is blinded, 2 when the file does
// not parse.
func runPolicyCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("policy check", "[--format text|json] FILE", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: auditlens policy check [--format text|json] FILE\n\n"+policyCheckHelp+"\nFlags:\n",
			needsHelp(detectorNeeds(detectors.Default())))
		fs.PrintDefaults()
	}
	format := fs.String("format", "text", "output: text or json")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("%w: name one audit policy file", errUsage)
	}
	if *format != "text" && *format != "json" {
		return fmt.Errorf("%w: --format %q: want %s", errUsage, *format, strings.Join(policy.Formats, " or "))
	}
	path := fs.Arg(0)
	p, err := readPolicy(path)
	if err != nil {
		return err
	}
	rep := policy.Check(p, detectorNeeds(detectors.Default()))
	if err := policy.Render(stdout, *format, path, rep); err != nil {
		return err
	}
	if rep.Blinded {
		return errFindings
	}
	return nil
}

// needer is a detector that declares what it must see in the audit log
// (the needs.go files of its package under detect/).
type needer interface {
	Name() string
	Needs() []policy.Need
}

// detectorNeeds lists the needs of the detectors that declare them, in
// their order. Every detector of detectors.Default() does (a test holds it).
func detectorNeeds(ds []detect.Detector) []policy.DetectorNeeds {
	var out []policy.DetectorNeeds
	for _, d := range ds {
		if n, ok := d.(needer); ok {
			out = append(out, policy.DetectorNeeds{Detector: n.Name(), Needs: n.Needs()})
		}
	}
	return out
}

// needsHelp lists each detector's needs by title, wrapped after the
// detector's name.
func needsHelp(dns []policy.DetectorNeeds) string {
	const indent, width = 23, 96
	var b strings.Builder
	for _, dn := range dns {
		line, words := fmt.Sprintf("  %-*s", indent-2, dn.Detector), 0
		for i, n := range dn.Needs {
			title := n.Title
			if i < len(dn.Needs)-1 {
				title += ";"
			}
			for _, w := range strings.Fields(title) {
				if words > 0 && len(line)+1+len(w) > width {
					b.WriteString(line + "\n")
					line, words = strings.Repeat(" ", indent), 0
				}
				if words > 0 || !strings.HasSuffix(line, " ") {
					line += " "
				}
				line += w
				words++
			}
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func readPolicy(path string) (*policy.Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, badInput{fmt.Errorf("reading the audit policy: %w", err)}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxPolicyBytes+1))
	if err != nil {
		return nil, badInput{fmt.Errorf("reading the audit policy %s: %w", path, err)}
	}
	if len(data) > maxPolicyBytes {
		return nil, badInput{fmt.Errorf("%s: larger than %d MiB: not an audit policy", path, maxPolicyBytes>>20)}
	}
	p, err := policy.Parse(data)
	if err != nil {
		return nil, badInput{fmt.Errorf("%s: %w (kube-apiserver would not load it)", path, err)}
	}
	return p, nil
}

// badInput is an input the command cannot use: main exits 2 (it is an
// errUsage) and prints the message as it is.
type badInput struct{ err error }

func (e badInput) Error() string   { return e.err.Error() }
func (e badInput) Unwrap() []error { return []error{e.err, errUsage} }
