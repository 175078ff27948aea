package ingest

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzEnvelope feeds DecodeImportLine untrusted lines: the fixtures' lines,
// the table cases and the audit seeds. Whatever the line, it must not
// panic, must not keep references into the line, must tag every row with
// a valid cluster and, when it fails, must leave the batch as it was.
func FuzzEnvelope(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	for _, name := range []string{"aks-storage.json", "aks-eventhub.json", "eks-messages.jsonl", "gke.jsonl"} {
		data, err := os.ReadFile(filepath.Join(envelopeDir, name))
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<22)
		for i := 0; sc.Scan() && i < 3; i++ {
			f.Add(bytes.Clone(sc.Bytes()))
		}
	}
	for _, s := range []string{
		aksLine("kube-audit", aksID, envEvent),
		`{"records":[` + aksLine("kube-audit", aksID, envEvent) + `,1]}`,
		cwLine("DATA_MESSAGE", "/aws/eks/prod-eks/cluster", "kube-apiserver-audit-0a1b", envEvent, envWatch),
		cwLine("DATA_MESSAGE", "/aws/eks/e/cluster", "", envEvent) + cwLine("CONTROL_MESSAGE", "", "", "x"),
		"2026-05-04T09:06:00.123Z " + envEvent,
		`{"message":` + jsonString(envEvent) + `}`,
		gkeLine("k8s.io", "io.k8s.core.v1.pods.create", "core/v1/namespaces/default/pods/p", `{"code":6}`),
		`{"protoPayload":{"serviceName":"k8s.io","@type":"google.cloud.audit.AuditLog","methodName":"a.b","resourceName":"/"},"insertId":"i"}`,
		`{"awslogs":{"data":"H4sIAAAAAAAA/w=="}}`,
		`{"a":"\"{"}{"b":[}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		in := bytes.Clone(line)
		for _, src := range []LineSource{{Cluster: "c", Fixed: true}, {}} {
			b := Batch{Rejects: []Reject{{Index: 7, Reason: "earlier"}}, Skipped: 3}
			_, err := DecodeImportLine(src, line, &b)
			if !bytes.Equal(in, line) {
				t.Fatal("DecodeImportLine modified its input")
			}
			if err != nil {
				if !errors.Is(err, ErrNotAudit) && !errors.Is(err, ErrNoCluster) {
					t.Fatalf("error %v wraps neither ErrNotAudit nor ErrNoCluster", err)
				}
				if len(b.Rows) != 0 || len(b.Rejects) != 1 || b.Skipped != 3 {
					t.Fatalf("batch changed with error %v: %+v", err, b)
				}
				continue
			}
			if b.Rejects[0].Reason != "earlier" || b.Skipped < 3 {
				t.Fatal("earlier reject or skip count overwritten")
			}
			if src.Fixed {
				checkRows(t, line, b)
				continue
			}
			for i, r := range b.Rows {
				if !ValidName(r.Cluster) || (r.APIServer != "" && !ValidName(r.APIServer)) {
					t.Fatalf("row %d: cluster %q apiserver %q", i, r.Cluster, r.APIServer)
				}
				if overlaps(r.Raw, line) {
					t.Fatalf("row %d: Raw aliases the input", i)
				}
			}
		}
	})
}
