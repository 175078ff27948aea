//go:build linux && (amd64 || arm64)

package chdb

import (
	"syscall"
	"unsafe"

	"github.com/ebitengine/purego"
)

func dlopen(path string) (uintptr, error) {
	// RTLD_LOCAL keeps ClickHouse's many symbols out of the global namespace.
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

// bind points *fptr (a pointer to a func variable) at the C function name.
func bind(handle uintptr, name string, fptr any) error {
	sym, err := purego.Dlsym(handle, name)
	if err != nil {
		return err
	}
	purego.RegisterFunc(fptr, sym)
	return nil
}

// kernelSigaction is struct sigaction as the rt_sigaction system call takes
// it on linux/amd64 and linux/arm64 (not glibc's layout).
type kernelSigaction struct {
	handler  uintptr
	flags    uint64
	restorer uintptr
	mask     uint64
}

// maxSignal is the highest signal number on Linux (SIGRTMAX).
const maxSignal = 64

// glibcInternal reports signals 32 and 33, which glibc reserves for thread
// cancellation and set*id broadcasts and may install lazily. They belong to
// libc, not to Go or ClickHouse, and are never touched.
func glibcInternal(sig int) bool { return sig == 32 || sig == 33 }

// signalSet is a snapshot of the disposition of every signal.
type signalSet struct {
	act [maxSignal + 1]kernelSigaction
	ok  [maxSignal + 1]bool
}

func rtSigaction(sig int, act, old *kernelSigaction) syscall.Errno {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig),
		uintptr(unsafe.Pointer(act)), uintptr(unsafe.Pointer(old)), 8, 0, 0)
	return errno
}

// saveSignals records the current handler of every signal 1..64.
func saveSignals() *signalSet {
	s := new(signalSet)
	for sig := 1; sig <= maxSignal; sig++ {
		s.ok[sig] = rtSigaction(sig, nil, &s.act[sig]) == 0
	}
	return s
}

const (
	sigDFL    = 0          // SIG_DFL
	saOnStack = 0x08000000 // SA_ONSTACK
)

// restore undoes what libchdb did to the signal handlers since the
// snapshot:
//
//   - A signal that had a handler (the Go runtime's, as a rule) or was
//     ignored gets that disposition back: the Go runtime needs SIGSEGV,
//     SIGBUS, SIGFPE, … for panics and stack checks, and os/signal needs
//     the rest. These are returned as restored.
//   - A signal that had none (SIG_DFL), for which libchdb installed a
//     handler, keeps libchdb's handler, because the engine may raise it
//     itself (ClickHouse collects thread stacks for system.stack_trace with
//     SIGRTMIN): putting back SIG_DFL would turn that into process death.
//     Like the Go runtime does for handlers it finds at start-up, the
//     handler gets SA_ONSTACK so it never runs on a small goroutine stack.
//     These are returned as adopted.
//
// Signals 32 and 33 belong to glibc and are left alone.
func (s *signalSet) restore() (restored, adopted []syscall.Signal) {
	for sig := 1; sig <= maxSignal; sig++ {
		if !s.ok[sig] || glibcInternal(sig) {
			continue
		}
		var cur kernelSigaction
		if rtSigaction(sig, nil, &cur) != 0 || cur == s.act[sig] {
			continue
		}
		if s.act[sig].handler == sigDFL {
			if cur.flags&saOnStack == 0 {
				cur.flags |= saOnStack
				if rtSigaction(sig, &cur, nil) != 0 {
					continue
				}
			}
			adopted = append(adopted, syscall.Signal(sig))
			continue
		}
		if rtSigaction(sig, &s.act[sig], nil) == 0 {
			restored = append(restored, syscall.Signal(sig))
		}
	}
	return restored, adopted
}
