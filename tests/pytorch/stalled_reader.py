"""Plays tune with a reader that has stalled: hands a small training job tune's hooks and
the write end of a pipe, as `tune watch` does (PYTHONPATH, TUNE_BRIDGE_FD,
TUNE_BRIDGE_INO), and reads nothing until the job has ended, so the pipe fills up.

    python stalled_reader.py BRIDGE_DIR STEPS DEADLINE_S

Prints one JSON object: whether the job finished before DEADLINE_S (else it was killed),
its exit code, its stderr's end and how many event lines the pipe held.
"""

import json
import os
import subprocess
import sys

JOB = """
import torch
torch.manual_seed(0)
torch.set_num_threads(1)
m = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
for _ in range(%d):
    opt.zero_grad()
    m(torch.randn(8, 4)).sum().backward()
    opt.step()
print("trained")
"""


def main():
    bridge, steps, deadline = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    r, w = os.pipe()
    env = dict(
        os.environ,
        PYTHONPATH=bridge,
        TUNE_BRIDGE_FD=str(w),
        TUNE_BRIDGE_INO=str(os.fstat(w).st_ino),
        TUNE_BRIDGE_KNOBS="{}",
    )
    env.pop("TUNE_BRIDGE_HOLDER", None)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB % steps],
        env=env,
        pass_fds=(w,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    try:
        out, err = job.communicate(timeout=deadline)
        finished = True
    except subprocess.TimeoutExpired:
        job.kill()
        out, err = job.communicate()
        finished = False
    os.set_blocking(r, False)
    held = b""
    while True:
        try:
            chunk = os.read(r, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        held += chunk
    lines = [l for l in held.split(b"\n") if l.startswith(b'{"ev"')]
    print(
        json.dumps(
            {
                "finished": finished,
                "code": job.returncode,
                "stdout": out[-2000:],
                "stderr": err[-2000:],
                "lines": len(lines),
            }
        )
    )


if __name__ == "__main__":
    main()
