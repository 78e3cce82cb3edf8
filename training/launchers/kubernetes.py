"""KubernetesLauncher: render infra/k8s/train-job.yaml for a rank job (train, evaluate, score), ``kubectl apply``
it, follow the logs, ``kubectl wait``.

The manifest holds a ConfigMap (the RCCL profile's variables), a headless Service (pod 0's DNS name
for the c10d rendezvous) and an indexed Job with one pod per node. A Job of the same name left by an
earlier attempt is deleted first (a Job's pod template cannot be changed), so a re-run resumes.
The Job is done when ``kubectl wait --for=condition=Complete`` or ``--for=condition=Failed`` returns.
The Job (namespace, name, context) is recorded in the run's lease before it is applied; the take-over of a stale
lease deletes it first, its pods with it (``fence``: ``kubectl delete job --cascade=foreground --wait``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import tempfile
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import yaml

from common.config import load_yaml_all
from training.launchers.base import Launcher, LaunchError, OnLine, RankJob, Started, infra_dir, render
from training.launchers.gpus import (RESOURCE_VENDORS, EnvChoice, Hint, choose_env, environments, gpu_vendor,
                                     hardware_hint, job_hardware)
from training.launchers.nodes import node_command
from training.rundir import RunDir, run_name

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_NOT_STARTED = re.compile(r"waiting to start|ContainerCreating|PodInitializing|No resources found|is pending|not found")
FENCE_WAIT_S = 120   # how long the Job of a stale run lease and its pods may take to be deleted


class KubernetesLauncher(Launcher):
    kind = "kubernetes"

    def describe(self) -> str:
        s = self.settings
        return f"kubernetes: {s.nodes} pod(s) x {s.ranks_per_node} rank(s), namespace {s.namespace}, image {s.image}"

    @staticmethod
    def job_name(job: RankJob, run_uri: str) -> str:
        """A DNS label for the Job and Service: ``dlrmflow-<job>-<run>[-<tag>]`` (shortened with a hash when long
        or not a DNS label as it is)."""
        label = job.label(run_uri)
        slug = _NOT_DNS.sub("-", label.lower()).strip("-") or "run"
        name = f"dlrmflow-{slug}"
        if len(name) > 40 or slug != label:  # pod hostnames add "-<index>"; keep distinct runs distinct
            name = f"{name[:31].rstrip('-')}-{hashlib.blake2b(label.encode(), digest_size=4).hexdigest()}"
        return name

    def kubectl(self, *args: str) -> list[str]:
        s = self.settings
        return [s.kubectl, *(["--context", s.context] if s.context else []), "--namespace", s.namespace, *args]

    def gpus(self, hardware: str | None = None) -> tuple[str, EnvChoice]:
        """(the GPU resource each pod requests, the pods' environment profiles). The resource: ``gpu_resource``, else
        the GPU vendor's device plugin's (nvidia.com/gpu for NVIDIA, else amd.com/gpu). The profiles:
        ``rccl_profiles``, else the vendor's: ``gpu_vendor``, else what the job says (its hardware profile
        ``hardware``, the resource it requests, no GPUs), else chosen in the pod (a resource of no known vendor)."""
        s = self.settings
        hints = [h for h in (hardware_hint(hardware),) if h]
        if not s.gpus_per_node:
            hints.append(Hint("none", "gpus_per_node 0"))
        elif s.gpu_resource in RESOURCE_VENDORS:
            hints.append(Hint(RESOURCE_VENDORS[s.gpu_resource], f"gpu_resource {s.gpu_resource}"))
        vendor = gpu_vendor(s, hints)
        resource = s.gpu_resource or ("nvidia.com/gpu" if vendor == "nvidia" else "amd.com/gpu")
        if vendor is None and s.gpu_resource is None:
            hints.append(Hint("amd", "gpu_resource amd.com/gpu, the default"))
        return resource, choose_env(s, hints, hardware)

    def environment(self, env: dict[str, str] | None = None, hardware: str | None = None) -> dict[str, str]:
        """The environment of every pod (its ConfigMap): the profiles chosen when the job is rendered (none when the
        pod chooses them, see ``gpus``), then the settings' env, then ``env``."""
        return environments(self.gpus(hardware)[1], self.settings.env, env)[0]

    def render(self, job: RankJob, run_uri: str, *, env: dict[str, str] | None = None,
               hardware: str | None = None) -> str:
        """The manifest of ``job`` on this run (multi-document YAML); ``hardware``: the job's hardware profile
        (``sharding.profile``), which tells the GPUs' vendor, so the GPU resource and the environment profile."""
        s = self.settings
        name = self.job_name(job, run_uri)
        labels = {"app.kubernetes.io/name": "dlrmflow", "app.kubernetes.io/component": job.name,
                  "dlrmflow/run": _NOT_DNS.sub("-", run_name(run_uri).lower())[:63].strip("-") or "run"}
        gpu_resource, choice = self.gpus(hardware)
        config_env, on_node = environments(choice, s.env, env)
        resources = {**({gpu_resource: str(s.gpus_per_node)} if s.gpus_per_node else {}),
                     **({"cpu": s.cpu} if s.cpu else {}), **({"memory": s.memory} if s.memory else {}),
                     **s.extra_resources}
        env_from = [{"configMapRef": {"name": f"{name}-env"}}]
        if s.s3_secret:
            env_from.append({"secretRef": {"name": s.s3_secret}})
        cmd = node_command(job, run_uri, python=s.python, nproc=s.ranks_per_node, nnodes=s.nodes,
                           is_host="$(( JOB_COMPLETION_INDEX == 0 ))", rdzv_timeout_s=s.rdzv_timeout_s)
        cmd = "\n".join([*choice.shell(on_node), cmd])   # the pod's log says which profile applies
        values = {
            "name": name, "job": job.name, "namespace": s.namespace, "labels": labels,
            "annotations": {"dlrmflow/environment-profile": choice.summary()},
            "config_env": config_env, "rdzv_port": s.rdzv_port, "nodes": s.nodes, "ttl_s": s.ttl_s,
            "nproc_per_node": s.ranks_per_node, "rdzv_timeout_s": s.rdzv_timeout_s,
            "service_account": s.service_account, "node_selector": s.node_selector,
            "image_pull_secrets": [{"name": s.image_pull_secret}] if s.image_pull_secret else [],
            "image": s.image, "node_command": cmd, "env_from": env_from, "resources": resources,
            "shm_size": s.shm_size,
        }
        path = infra_dir() / "k8s" / "train-job.yaml"
        text = render(path.read_text(), {k: v if k in ("name", "job") else json.dumps(v) for k, v in values.items()},
                      str(path))
        docs = [_prune(d) for d in load_yaml_all(text, str(path)) if d]
        return yaml.safe_dump_all(docs, sort_keys=False, width=1000)

    def start(self, job: RankJob, run: "RunDir", *, env: dict[str, str] | None, on_line: OnLine,
              started: Started | None = None) -> int:
        emit, run_uri = on_line, run.uri
        s = self.settings
        name = self.job_name(job, run_uri)
        manifest = self.render(job, run_uri, env=env, hardware=job_hardware(run))
        with tempfile.NamedTemporaryFile("w", prefix=f"{name}-", suffix=".yaml", delete=False) as f:
            f.write(manifest)
        if started is not None:   # before it exists: a kill right after the apply leaves it recorded
            started({"kind": self.kind, "namespace": s.namespace, "name": name, "context": s.context,
                     "what": f"Kubernetes job {s.namespace}/{name}"})
        self._check(self.kubectl("delete", "job", name, "--ignore-not-found", "--wait=true"), emit)
        self._check(self.kubectl("apply", "-f", f.name), emit)
        emit(f"dlrmflow: applied job/{name} ({self.describe()})")

        stop = threading.Event()
        follower = threading.Thread(target=self._follow_logs, args=(name, emit, stop), daemon=True)
        follower.start()
        waits = {cond: self.kubectl("wait", f"--for=condition={cond}", f"job/{name}", f"--timeout={s.timeout_s}s")
                 for cond in ("Complete", "Failed")}
        procs: dict[str, subprocess.Popen] = {}
        try:
            with ThreadPoolExecutor(2) as pool:
                futures = {}
                for cond, cmd in waits.items():
                    procs[cond] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                    futures[pool.submit(procs[cond].communicate)] = cond
                pending = set(futures)
                outcome = None
                while pending and outcome is None:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in done:
                        if procs[futures[fut]].returncode == 0:
                            outcome = futures[fut]
                for p in procs.values():
                    if p.poll() is None:
                        p.terminate()
        except BaseException:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
            subprocess.run(self.kubectl("delete", "job", name, "--ignore-not-found", "--wait=false"), check=False)
            emit(f"dlrmflow: interrupted; deleted job/{name}")
            raise
        finally:
            stop.set()
            follower.join(timeout=30)
        if outcome == "Complete":
            emit(f"dlrmflow: job/{name} complete")
            return 0
        if outcome is None:
            emit(f"dlrmflow: job/{name} did not finish within {s.timeout_s} s (kubectl wait timed out)")
            return 124
        code = self._exit_code(name)
        emit(f"dlrmflow: job/{name} failed (exit code {code})")
        return code

    def fence_command(self, job: dict) -> list[str]:
        """The kubectl command that deletes the recorded Job ``job`` and waits (``FENCE_WAIT_S`` at most) until its
        pods are gone too (foreground cascade: the Job goes last)."""
        context = job.get("context")
        return [self.settings.kubectl, *(["--context", context] if context else []), "--namespace", job["namespace"],
                "delete", "job", job["name"], "--ignore-not-found", "--cascade=foreground", "--wait=true",
                f"--timeout={FENCE_WAIT_S}s"]

    def fence(self, job: dict, run: RunDir, say: OnLine) -> str:
        """Delete the Job of a stale run lease with its pods (``fence_command``); LaunchError naming it and the fix
        when it may still run."""
        cmd, what = self.fence_command(job), f"Kubernetes job {job['namespace']}/{job['name']}"
        fix = shlex.join(["kubectl", *cmd[1:]])
        say("dlrmflow: " + shlex.join(cmd))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FENCE_WAIT_S + 30)
        except FileNotFoundError:
            raise LaunchError(f"{run}: the previous holder's {what} may still be running, and '{cmd[0]}' is not "
                              f"found here to delete it. Fix: {fix}, then remove {run.join(RunDir.LEASE)} and "
                              "re-run.") from None
        except subprocess.TimeoutExpired:
            proc = None
        if proc is None or proc.returncode != 0:
            why = "kubectl: " + proc.stderr.strip() if proc is not None else f"not deleted in {FENCE_WAIT_S + 30} s"
            raise LaunchError(f"{run}: the previous holder's {what} may still be running and could not be deleted "
                              f"({why}). Fix: {fix}, then re-run.")
        if not proc.stdout.strip():
            return f"{what} was gone already"
        return f"deleted {what} and its pods"

    def _check(self, cmd: list[str], emit: OnLine) -> None:
        emit("dlrmflow: " + shlex.join(cmd))
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise LaunchError(f"'{self.settings.kubectl}' not found. Fix: install kubectl in the image that runs "
                              "the flow, or set kubernetes.kubectl to its path.") from None
        for line in (proc.stdout + proc.stderr).splitlines():
            emit(f"kubectl: {line}")
        if proc.returncode != 0:
            raise LaunchError(f"{shlex.join(cmd)} failed (exit code {proc.returncode}): {proc.stderr.strip()}")

    def _follow_logs(self, name: str, emit: OnLine, stop: threading.Event) -> None:
        """Stream every pod's output (without prefixes, so torchrun's ``[defaultN]:`` rank tags stay first)."""
        cmd = self.kubectl("logs", "-f", "-l", f"job-name={name}", "--all-containers",
                           f"--max-log-requests={max(self.settings.nodes, 1)}", "--pod-running-timeout=24h")
        while not stop.is_set():
            streamed = False
            try:
                with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
                    watcher = threading.Thread(target=lambda: (stop.wait(), proc.poll() is None and proc.terminate()),
                                               daemon=True)
                    watcher.start()
                    for line in proc.stdout:
                        if not streamed and _NOT_STARTED.search(line):
                            continue  # pods still pending: try again below
                        streamed = True
                        emit(line.rstrip("\n"))
                    proc.wait()
            except FileNotFoundError:
                return
            if streamed or stop.wait(self.log_retry_s):
                return

    log_retry_s = 5.0

    def _exit_code(self, name: str) -> int:
        """The first non-zero container exit code of the Job's pods (1 if none is known)."""
        jsonpath = "{range .items[*]}{.status.containerStatuses[0].state.terminated.exitCode}{\"\\n\"}{end}"
        proc = subprocess.run(self.kubectl("get", "pods", "-l", f"job-name={name}", "-o", f"jsonpath={jsonpath}"),
                              capture_output=True, text=True)
        codes = [int(c) for c in proc.stdout.split() if c.lstrip("-").isdigit()]
        return next((c for c in codes if c != 0), 1)


def _prune(node):
    """Drop null and empty values (optional fields the settings leave unset)."""
    if isinstance(node, dict):
        out = {k: _prune(v) for k, v in node.items()}
        return {k: v for k, v in out.items() if v is not None and v != {} and v != []}
    if isinstance(node, list):
        return [_prune(v) for v in node]
    return node
