"""The arrival stream of `simulate-cluster`: training jobs drawn from published GPU-cluster traces.

Pure: `arrival_stream(rng, ...)` draws everything from the `random.Random` it is
given; no clock, no I/O. A job is a `JobSpec`: when it arrives, how many workers
it has (one host each, the PS on one more host), its model size (the bytes its
PS broadcasts every iteration), its iterations and its compute time per iteration.

Where the distributions come from (read, approximately, off the published
figures; no trace file was available offline, so every number below is an
approximation, not a fit):

- *Job size* (workers = GPUs of the job, one worker per host here). Philly
  (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN
  Training Workloads", USENIX ATC'19, §2–3, the distribution of GPUs per job),
  Helios (Hu et al., "Characterization and Prediction of Deep Learning Workloads
  in Large-Scale GPU Datacenters", SC'21, §3, the CDF of GPU demand per job) and
  PAI (Weng et al., "MLaaS in the Wild", NSDI'22, §3, GPUs requested per task)
  agree on the shape: most jobs use one GPU, almost all are powers of two, jobs
  of ≤ 8 GPUs are well over 90 %, and a few percent use 16 to several hundred
  GPUs (and hold most GPU time). `SIZES` puts that shape on powers of two.
- *Duration*. The same papers report heavy-tailed, roughly log-normal run
  times: a median of minutes to tens of minutes, a tail of many hours (Philly,
  Helios) to days. `DURATION_MEDIAN_S` and `DURATION_SIGMA` give a log-normal of
  median 10 min with σ = 1.5 (its p99 ≈ 5.5 h), cut at `DURATION_MAX_S` so that
  a run of a few simulated hours sees jobs finish.
- *Model size*. The traces publish no model sizes; PAI (Weng et al., §4) names
  the model families (CNNs, BERT-like NLP models, recommendation models with
  large embeddings). `MODELS` are sizes of well-known models of those families
  (fp32 parameters), with shares chosen by us, not measured.
- *Compute per iteration* is uniform in `COMPUTE_S` (hundreds of milliseconds,
  typical of data-parallel steps); the iterations are the duration divided by
  one iteration alone on the fabric (the model broadcast at the 10 Gbit/s host
  link rate, plus the compute), so the duration drawn is the job's length on an
  idle fabric.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from controller.algorithm.topologies import GBIT

MB = 8e6  # bits in a megabyte
#: (workers, probability): the job-size shape of Philly, Helios and PAI on powers of two (approximation)
SIZES: tuple[tuple[int, float], ...] = (
    (1, 0.50), (2, 0.14), (4, 0.14), (8, 0.13), (16, 0.045), (32, 0.025), (64, 0.012), (128, 0.006), (256, 0.002),
)
#: (name, model bits, probability): well-known models of the families PAI reports (shares are ours)
MODELS: tuple[tuple[str, float, float], ...] = (
    ("ResNet-50", 100 * MB, 0.35),
    ("VGG-16", 550 * MB, 0.15),
    ("BERT-base", 440 * MB, 0.25),
    ("BERT-large", 1340 * MB, 0.15),
    ("GPT-2 XL", 6000 * MB, 0.10),
)
DURATION_MEDIAN_S = 600.0
DURATION_SIGMA = 1.5
DURATION_MIN_S = 30.0
DURATION_MAX_S = 4 * 3600.0
COMPUTE_S = (0.1, 0.5)
HOST_RATE = 10 * GBIT  # the host links of the evaluation's fabrics


@dataclass(frozen=True)
class JobSpec:
    """One training job of the arrival stream."""

    id: str
    arrival_s: float
    workers: int
    model_bits: float
    iterations: int
    compute_s: float  # per iteration

    def min_duration_s(self, host_rate: float) -> float:
        """Its length alone on the fabric: every broadcast at the host link's rate."""
        return self.iterations * (self.model_bits / host_rate + self.compute_s)


def _pick(rng: random.Random, weighted: tuple[tuple, ...], weight_at: int = -1) -> tuple:
    return rng.choices(weighted, weights=[w[weight_at] for w in weighted])[0]


def draw_job(rng: random.Random, job_id: str, arrival_s: float, max_workers: int,
             host_rate: float = HOST_RATE) -> JobSpec:
    """One job: size, model, duration and compute time from the distributions above;
    its iterations make the duration drawn its length alone on the fabric (every
    broadcast at `host_rate`)."""
    workers = min(_pick(rng, SIZES)[0], max_workers)
    _, bits, _ = _pick(rng, MODELS)
    compute = rng.uniform(*COMPUTE_S)
    duration = rng.lognormvariate(math.log(DURATION_MEDIAN_S), DURATION_SIGMA)
    duration = min(max(duration, DURATION_MIN_S), DURATION_MAX_S)
    return JobSpec(job_id, arrival_s, workers, bits, max(1, round(duration / (bits / host_rate + compute))), compute)


def arrival_stream(rng: random.Random, hours: float, jobs_per_hour: float, max_workers: int,
                   host_rate: float = HOST_RATE) -> tuple[JobSpec, ...]:
    """Poisson arrivals at `jobs_per_hour` over `hours`, each job drawn by `draw_job`."""
    if hours <= 0 or jobs_per_hour <= 0:
        raise ValueError("hours and jobs_per_hour must be > 0")
    if max_workers < 1:
        raise ValueError("max_workers must be >= 1")
    out: list[JobSpec] = []
    t = rng.expovariate(jobs_per_hour / 3600.0)
    while t < hours * 3600.0:
        out.append(draw_job(rng, f"job-{len(out):05d}", t, max_workers, host_rate))
        t += rng.expovariate(jobs_per_hour / 3600.0)
    return tuple(out)


def jobs_per_hour_for(load: float, hosts: int, max_workers: int, host_rate: float = HOST_RATE,
                      samples: int = 4000, seed: int = 0) -> float:
    """The arrival rate at which the jobs' hosts (workers + PS), each held for the
    job's length on an idle fabric, would occupy `load` of `hosts` on average."""
    if not 0 < load <= 1:
        raise ValueError("load must be within (0, 1]")
    rng = random.Random(seed)
    drawn = [draw_job(rng, "x", 0.0, max_workers, host_rate) for _ in range(samples)]
    host_seconds = sum((j.workers + 1) * j.min_duration_s(host_rate) for j in drawn) / samples
    return load * hosts / host_seconds * 3600.0
