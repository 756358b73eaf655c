package coretest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// KillChild runs the test named child of the current test binary as a
// child process, with env added to its environment and a pipe as its file
// descriptor 3, on which the child writes one line per event it reports.
// KillChild hands each line to onLine and sends the child SIGKILL the
// first time onLine returns true; it reads on until the child is gone and
// fails the test unless the child died by that SIGKILL. The kill -9 tests
// of the durable stores (bridge/buffer, core/queue/embedded) share it.
func KillChild(t testing.TB, child string, env []string, onLine func(line string) (kill bool)) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var stderr SyncBuffer
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = pw.Close() // the child holds the only write end: EOF when it dies

	killed := false
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if onLine(sc.Text()) && !killed {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL (%v); stderr:\n%s", err, stderr.String())
	}
	if !killed {
		t.Fatal("child died before it was killed")
	}
}
