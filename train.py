"""Train the HVAC symbol detector under a fixed wall-clock budget (the file the agent edits).

Run by the harness as ``python train.py`` in the experiment's checkout with:
  LOOPER_BUDGET_SECONDS  training wall-clock budget, s (the harness kills at budget + grace)
  LOOPER_DATA            prepared data folder (prepare.py output, with dataset.yaml)
  LOOPER_OUT             an empty folder for this run
  LOOPER_SEED            random seed
  LOOPER_DEVICE          cpu | cuda | 0 | 0,1 ...
  LOOPER_MAX_STEPS       optional step budget: stop after exactly this many optimizer steps, with
                         the learning-rate schedule (warm-up, then linear or cosine decay to
                         LR0 * LRF) laid out over exactly those steps (same seed + same steps ->
                         same weights, however busy the machine); the wall-clock budget still
                         applies: a run that cannot fit its steps stops at the budget and says so
  LOOPER_PRETRAINED_DIR  the workspace's read-only pretrained/ folder (absolute; default
                         ./pretrained): PRETRAINED names the starting weights in it
Writes $LOOPER_OUT/weights.pt (a safetensors state dict with the model yaml and class names in
its header: weights are data, see save_weights) and $LOOPER_OUT/train.json and ends with one line
``LOOPER_SUMMARY steps=... epochs=... seconds=... loss=...``.
"""

from __future__ import annotations

import time

T_START = time.time()  # the budget counts from here, imports included

# ==== HYPERPARAMETERS (the planner rewrites this block: one literal per line) ====
PRETRAINED = "start.safetensors"  # starting weights in the workspace's pretrained/ folder ("" = from scratch)
MODEL = "yolov8"  # architecture yaml family in ultralytics/cfg/models (yolov8 | yolo11 | ...)
WIDTH = 0.125  # width multiple: channels scale (0.25 = "n")
DEPTH = 0.33  # depth multiple: repeated blocks scale (0.33 = "n")
IMGSZ = 256  # training image side, px (tiles are 256 px)
BATCH = 8  # images per optimizer step
OPTIMIZER = "AdamW"  # SGD | Adam | AdamW | ...
LR0 = 0.01  # initial learning rate (Ultralytics' default lr0)
LRF = 0.1  # final learning rate as a fraction of LR0
MOMENTUM = 0.9  # SGD momentum / Adam beta1
WEIGHT_DECAY = 0.0005  # L2 weight decay
WARMUP_EPOCHS = 0.0  # learning-rate warm-up, epochs (0: none)
FREEZE = 0  # layers frozen from the input side (0: none; 10: the whole yolov8 backbone)
COS_LR = False  # cosine learning-rate schedule instead of linear
MOSAIC = 0.0  # probability of mosaic augmentation
SCALE = 0.0  # random scale gain (+/- fraction)
TRANSLATE = 0.05  # random translation (+/- fraction of image side)
FLIPLR = 0.0  # probability of a left-right flip (symbols have handedness: off)
FLIPUD = 0.0  # probability of an up-down flip
BOX_GAIN = 7.5  # box loss gain
CLS_GAIN = 2.0  # classification loss gain
DFL_GAIN = 1.5  # distribution focal loss gain
CLS_PRIOR = 0.01  # initial class probability of the detection head (0: Ultralytics' default bias); from scratch or a fresh class layer (transfer) only: a pretrained head keeps its bias
VALIDATE = False  # run Ultralytics' validation on the val tiles after each epoch (costs budget)
WORKERS = 1  # data loader worker processes
THREADS = 0  # torch CPU threads (0: LOOPER_THREADS when looper runs several side by side, else OMP_NUM_THREADS where set, else every core this process may use)
AMP = True  # mixed precision (float16) on a GPU, after a local check on this run's own model (amp_check: never a download); off on a CPU
CACHE = "auto"  # decoded training tiles held in memory: auto (ram while they fit CACHE_LIMIT_MB) | ram | none
CACHE_LIMIT_MB = 200  # CACHE = "auto": the distinct training tiles' decoded size up to which they are held, MB
REPEAT_THRESHOLD = 0.1  # repeat-factor sampling: tiles holding a class seen in fewer than this fraction of tiles repeat (0: off)
REPEAT_POWER = 1.0  # repeat factor r(c) = (REPEAT_THRESHOLD / f(c)) ** REPEAT_POWER (0.5: LVIS; 1.0: full balance)
OVERHEAD_SECONDS = 8.0  # budget kept back for model build, final validation and saving, s
# ==== END HYPERPARAMETERS ====

import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


def env(name: str, default: str | None = None) -> str:
    value = os.environ.get(name, default)
    if value is None or value == "":
        sys.exit(f"train.py: environment variable {name} is required")
    return value


BUDGET = float(env("LOOPER_BUDGET_SECONDS", "60"))
DATA = Path(env("LOOPER_DATA", "data")).resolve()
OUT = Path(env("LOOPER_OUT", "runs/manual")).resolve()
SEED = int(env("LOOPER_SEED", "0"))
DEVICE = env("LOOPER_DEVICE", "cpu")
MAX_STEPS = int(os.environ.get("LOOPER_MAX_STEPS") or 0)  # 0: no step budget (wall clock only)
PRETRAINED_DIR = Path(os.environ.get("LOOPER_PRETRAINED_DIR") or "pretrained").resolve()
OMP_THREADS = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # the environment's own (Ultralytics sets 1)

os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(".looper/ultralytics").resolve()))
os.environ.setdefault("YOLO_VERBOSE", "True")
Path(os.environ["YOLO_CONFIG_DIR"]).mkdir(parents=True, exist_ok=True)

if not (DATA / "dataset.yaml").is_file():
    sys.exit(f"train.py: no dataset.yaml in LOOPER_DATA={DATA} (run prepare.py first)")
OUT.mkdir(parents=True, exist_ok=True)

import torch  # noqa: E402
from ultralytics import YOLO  # noqa: E402
from ultralytics.utils import SETTINGS, YAML  # noqa: E402

# Ultralytics' logging integrations stay off (in memory, nothing saved): the sandbox has no network and no
# store to write to, and an installed MLflow would otherwise stall every run retrying its database; the
# harness tracks the night itself ([tracking] in looper.toml).
dict.update(SETTINGS, {k: False for k in ("clearml", "comet", "dvc", "mlflow", "raytune", "tensorboard", "wandb")})

CUDA = DEVICE not in ("cpu", "mps") and torch.cuda.is_available()


def _deterministic(mode: bool, *, warn_only: bool = False) -> None:
    """torch.use_deterministic_algorithms without its import of torch._inductor (1.5 to 6 s of the budget's
    start-up here; it only sets inductor's flag for torch.compile, which this run never uses)."""
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)


torch.use_deterministic_algorithms = _deterministic  # Ultralytics' init_seeds(deterministic=True) calls it


def amp_agrees(net: torch.nn.Module, device: torch.device, dtype: torch.dtype = torch.float16) -> tuple[bool, str]:
    """Does ``net`` give the same raw outputs in float32 and under ``dtype`` autocast on ``device``? One fixed
    input of IMGSZ px (its own generator: the run's random streams are untouched), eval mode (no batch-norm
    update), boxes within 0.5 px and scores within 1 % (Ultralytics' own tolerance on its boxes)."""
    x = torch.rand(2, 3, IMGSZ, IMGSZ, generator=torch.Generator().manual_seed(0)).to(device)
    was_training = net.training
    net.eval()
    try:
        with torch.no_grad():
            a = net(x)[0].float()
            with torch.autocast(device.type, dtype=dtype):
                b = net(x)[0].float()
    finally:
        net.train(was_training)
    if not bool(torch.isfinite(b).all()):
        return False, f"{dtype} outputs not finite"
    err = float((a - b).abs().max())
    return bool(torch.allclose(a, b, atol=0.5, rtol=0.01)), f"max abs difference {err:.4f}"


def amp_check(net: torch.nn.Module) -> bool:
    """Stands in for Ultralytics' check_amp, which downloads yolo26n.pt into ./weights (a read-only folder in
    looper's sandbox, and offline): AMP on a GPU when this run's own model agrees with itself in float16."""
    device = next(net.parameters()).device
    if not AMP:
        on, why = False, "AMP = False"
    elif device.type != "cuda":
        on, why = False, f"device {device.type} (AMP is for a GPU)"
    else:
        try:
            on, why = amp_agrees(net, device)
        except Exception as exc:  # noqa: BLE001 (a check that cannot run leaves AMP off and says why)
            on, why = False, f"check failed: {type(exc).__name__}: {exc}"
    PHASES["amp"] = round(time.time() - T_START, 2)
    print(f"LOOPER_AMP on={on} reason={why}", flush=True)
    return on


import ultralytics.engine.trainer  # noqa: E402

ultralytics.engine.trainer.check_amp = amp_check  # the trainer's own AMP check downloads a model
PHASES: dict[str, float] = {"imports": round(time.time() - T_START, 2)}  # start-up, s since T_START, per phase


def model_yaml() -> Path:
    """The architecture yaml at WIDTH x DEPTH, written into LOOPER_OUT (nothing downloaded)."""
    import ultralytics

    root = Path(ultralytics.__file__).parent / "cfg" / "models"
    found = sorted(root.rglob(f"{MODEL}.yaml"))
    if not found:
        sys.exit(f"train.py: no architecture {MODEL}.yaml under {root}")
    cfg = YAML.load(found[0])
    cfg.pop("scales", None)
    cfg["depth_multiple"], cfg["width_multiple"], cfg["max_channels"] = DEPTH, WIDTH, 1024
    cfg["nc"] = len(YAML.load(DATA / "dataset.yaml")["names"])
    path = OUT / "model.yaml"
    YAML.save(path, cfg)
    return path


def split_images(split: str) -> list[Path]:
    """The image tiles of one split, as dataset.yaml names them (a folder relative to the yaml)."""
    spec = YAML.load(DATA / "dataset.yaml")[split]
    folder = (DATA / spec).resolve()
    if not folder.is_dir():
        sys.exit(f"train.py: dataset.yaml {split}: {spec} is not a folder under LOOPER_DATA={DATA}")
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))


def tile_classes(images: list[Path], label_files: list[Path]) -> list[set[int]]:
    """The classes on each tile: from the data set's label index (labels.cache, made once per data set by looper)
    when it holds every tile, else read from each label file (the index saves reading them all, each run)."""
    index = label_files[0].parent.with_suffix(".cache") if label_files else None
    if index is not None and index.is_file():
        try:
            import numpy as np

            found = {lb["im_file"]: {int(c) for c in lb["cls"].ravel()}
                     for lb in np.load(index, allow_pickle=True).item()["labels"]}
            if all(str(p) in found for p in images):
                return [found[str(p)] for p in images]
        except Exception as exc:  # noqa: BLE001 - an unreadable index: the label files say the same
            print(f"LOOPER_DATA_INDEX unread ({type(exc).__name__}): reading the label files", flush=True)
    return [{int(line.split()[0]) for line in (lf.read_text() if lf.is_file() else "").splitlines() if line.strip()}
            for lf in label_files]


def repeat_factors(classes: list[set[int]]) -> list[float]:
    """Repeat factor per tile (LVIS repeat-factor sampling): max over its classes of
    max(1, (REPEAT_THRESHOLD / f(c)) ** REPEAT_POWER), f(c) = fraction of tiles holding class c."""
    counts: dict[int, int] = {}
    for cs in classes:
        for c in cs:
            counts[c] = counts.get(c, 0) + 1
    n = max(1, len(classes))
    return [max([1.0] + [(REPEAT_THRESHOLD * n / counts[c]) ** REPEAT_POWER for c in cs]) for cs in classes]


LISTED: dict[str, int] = {}  # tiles listed per split, repeats included (the train loader's length follows from it)


def list_split(split: str, repeat: bool) -> Path:
    """A list file OUT/data/<split>.txt naming the split's tiles in LOOPER_DATA, each once per repeat. The tiles
    and their labels are read where they are (read-only in the sandbox): nothing is linked or copied per run."""
    import random

    images = split_images(split)
    labels = [Path(str(p.parent.parent / "labels" / p.stem) + ".txt") for p in images]
    if repeat and REPEAT_THRESHOLD > 0:
        rng = random.Random(SEED)  # stochastic rounding of fractional repeat factors, reproducible per seed
        reps = [int(r) + (rng.random() < r - int(r)) for r in repeat_factors(tile_classes(images, labels))]
    else:
        reps = [1] * len(images)
    path = OUT / "data" / f"{split}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{img}\n" * k for img, k in zip(images, reps, strict=True)))
    LISTED[split] = sum(reps)
    print(f"LOOPER_DATA_LIST split={split} tiles={len(images)} listed={sum(reps)}", flush=True)
    return path


def data_yaml() -> Path:
    """A dataset yaml in LOOPER_OUT over the listed (and, for train, class-balanced) tiles."""
    cfg = YAML.load(DATA / "dataset.yaml")
    cfg.pop("path", None)
    cfg["train"] = str(list_split("train", repeat=True))
    cfg["val"] = str(list_split("val", repeat=False))
    path = OUT / "dataset.yaml"
    YAML.save(path, cfg)
    return path


def cache_mode() -> str | bool:
    """Ultralytics' cache argument for CACHE: "auto" holds the decoded tiles in memory only while the data set's
    distinct training tiles take at most CACHE_LIMIT_MB (3 bytes a pixel at IMGSZ), else reads them from disk."""
    mode = CACHE
    if mode == "auto":
        mode = "ram" if len(split_images("train")) * IMGSZ * IMGSZ * 3 <= CACHE_LIMIT_MB * 2**20 else "none"
    print(f"LOOPER_CACHE mode={mode}", flush=True)
    return False if mode == "none" else mode


def tile_dataset() -> type:
    """Ultralytics' YOLODataset over a list with repeats whose label index is the data set's own: its labels.cache
    beside the labels, made once per data set by looper and read-only here, covers each distinct tile once, so
    the labels are read from it (not scanned again each run) and then repeated as the list repeats the tile."""
    from ultralytics.data.dataset import YOLODataset
    from ultralytics.data.utils import img2label_paths

    class TileDataset(YOLODataset):
        def get_labels(self):  # noqa: ANN202
            listed = self.im_files
            self.im_files = sorted(set(listed))
            labels = {lb["im_file"]: lb for lb in super().get_labels()}
            self.im_files = [f for f in listed if f in labels]
            self.label_files = img2label_paths(self.im_files)
            return [dict(labels[f]) for f in self.im_files]

    return TileDataset


def save_weights(checkpoint: Path, dst: Path) -> None:
    """Weights are data: the trained network's tensors as a safetensors file whose header holds
    the architecture yaml and the class names (format looper-weights/1). evaluate.py builds the
    model from that yaml and loads the tensors; it never unpickles anything train.py wrote."""
    import yaml
    from safetensors.torch import save_file

    ckpt = torch.load(checkpoint, map_location="cpu", weights_only=False)  # Ultralytics' checkpoint of this run
    net = ckpt.get("ema") or ckpt.get("model")
    names = net.names
    names = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)
    tensors = {k: v.detach().clone().contiguous() for k, v in net.state_dict().items()}
    meta = {"format": "looper-weights/1", "model_yaml": yaml.safe_dump(dict(net.yaml), sort_keys=False),
            "names": json.dumps(names)}
    save_file(tensors, str(dst), metadata=meta)


def start_weights(arch_yaml: Path) -> dict[str, torch.Tensor] | None:
    """The starting tensors named by PRETRAINED (None: from scratch), checked against this run's
    architecture; a file of another architecture ends the run with what is wrong. A checkpoint of
    other classes than the data's is a transfer (TRANSFER): start_trainer loads what fits."""
    if not PRETRAINED:
        return None
    import yaml
    from safetensors import safe_open

    path = PRETRAINED_DIR / PRETRAINED
    if not path.is_file():
        sys.exit(f"train.py: no starting weights {path} (PRETRAINED = {PRETRAINED!r}; \"\" trains from scratch)")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no items())
        names = json.loads(meta.get("names", "null"))
        start_yaml = yaml.safe_load(meta.get("model_yaml", "")) or {}
    except Exception as exc:  # noqa: BLE001 (any unreadable file is the same answer)
        sys.exit(f"train.py: starting weights {path} are not a readable looper-weights safetensors file: {exc}")
    want = YAML.load(DATA / "dataset.yaml")["names"]
    want = [want[i] for i in sorted(want)] if isinstance(want, dict) else list(want)
    if names != want:
        TRANSFER.append(f"{len(names) if isinstance(names, list) else '?'} classes -> the data's {len(want)}")
    ours = YAML.load(arch_yaml)
    for key in ("backbone", "head", "width_multiple", "depth_multiple"):
        if json.dumps(start_yaml.get(key)) != json.dumps(ours.get(key)):
            sys.exit(f"train.py: starting weights {path} are another architecture than MODEL={MODEL} "
                     f"WIDTH={WIDTH} DEPTH={DEPTH} ({key} differs); set PRETRAINED = \"\" to train this one from scratch")
    return tensors


def lr_factor(step: int, total: int, warmup: int) -> float:
    """LR0's multiplier at 0-based optimizer step ``step`` of ``total``: a linear warm-up from 0 over
    ``warmup`` steps, then linear (or cosine, COS_LR) decay from 1 to LRF at the last step."""
    x = step / max(1, total - 1)
    decay = LRF + (1.0 - LRF) * ((1.0 + math.cos(math.pi * x)) / 2.0 if COS_LR else 1.0 - x)
    return decay * min(1.0, (step + 1) / (warmup + 1)) if warmup > 0 else decay


TRANSFER: list[str] = []  # set by start_weights when the checkpoint's classes are not the data's


def transfer(net: torch.nn.Module, start: dict[str, torch.Tensor]) -> None:
    """Fine-tune a checkpoint of other classes (as YOLO users fine-tune yolo11n.pt on theirs): every
    tensor whose name and shape fit is loaded; the rest (the head's class layers) start fresh. The log
    says how many were transferred and which were not."""
    own = net.state_dict()
    fit = {k: v for k, v in start.items() if k in own and tuple(own[k].shape) == tuple(v.shape)}
    fresh = sorted(k for k in own if k not in fit)
    net.load_state_dict(fit, strict=False)
    print(f"LOOPER_START weights={PRETRAINED} tensors={len(fit)} transferred of {len(own)} ({TRANSFER[0]}); "
          f"fresh: {', '.join(fresh) or 'none'}", flush=True)


def start_trainer(start: dict[str, torch.Tensor] | None) -> type:
    """Ultralytics' detection trainer, its fresh model loaded with the starting tensors (all of them:
    a missing or extra tensor, or one of another shape, ends the run and names it), or, for a
    checkpoint of other classes, with every tensor that fits (transfer)."""
    from ultralytics.models.yolo.detect import DetectionTrainer

    class StartTrainer(DetectionTrainer):
        def build_dataset(self, img_path, mode="train", batch=None):  # noqa: ANN001, ANN202
            import ultralytics.data.build as build

            plain, build.YOLODataset = build.YOLODataset, tile_dataset()  # the one class Ultralytics builds
            try:
                return super().build_dataset(img_path, mode=mode, batch=batch)
            finally:
                build.YOLODataset = plain

        def get_model(self, cfg=None, weights=None, verbose=True):  # noqa: ANN001, ANN202
            net = super().get_model(cfg=cfg, weights=weights, verbose=verbose)
            if start is not None and TRANSFER:
                transfer(net, start)
            elif start is not None:
                try:
                    net.load_state_dict(start, strict=True)
                except RuntimeError as exc:
                    sys.exit(f"train.py: starting weights {PRETRAINED_DIR / PRETRAINED} do not fit the model: "
                             + str(exc).splitlines()[0] + " " + " ".join(str(exc).splitlines()[1:3]))
                print(f"LOOPER_START weights={PRETRAINED} tensors={len(start)}", flush=True)
            return net

    return StartTrainer


def main() -> int:
    torch.manual_seed(SEED)
    arch = model_yaml()
    start = start_weights(arch)
    model = YOLO(str(arch), task="detect")
    PHASES["model"] = round(time.time() - T_START, 2)
    state = {"steps": 0, "epochs": 0, "losses": {}, "stopped_by": "epochs" if MAX_STEPS else "time"}
    deadline = T_START + BUDGET - OVERHEAD_SECONDS  # the wall clock still rules a step-budget run

    warmup_steps = [0]  # set once the loader's length is known (a step budget only)

    def on_batch_start(trainer: object) -> None:
        if "startup" not in state:  # imports, data links, model build, caching: budget spent before step 1
            state["startup"] = PHASES["first_step"] = round(time.time() - T_START, 2)
            print(f"LOOPER_STARTUP seconds={state['startup']}", flush=True)
        if MAX_STEPS:  # the step budget's own schedule: every group's LR at this step, whatever the epoch
            f = lr_factor(state["steps"], MAX_STEPS, warmup_steps[0])
            for g in trainer.optimizer.param_groups:  # type: ignore[attr-defined]
                g["lr"] = g["initial_lr"] * f
        lr = float(trainer.optimizer.param_groups[0]["lr"])  # type: ignore[attr-defined]
        state.setdefault("lr_first", lr)
        state["lr_last"] = lr

    def on_batch_end(trainer: object) -> None:
        state["steps"] += 1
        if MAX_STEPS and state["steps"] >= MAX_STEPS:
            state["stopped_by"] = "steps"
            trainer.stop = True  # type: ignore[attr-defined]
        elif MAX_STEPS and time.time() > deadline:
            state["stopped_by"] = "time"  # the machine was too slow for the step budget
            trainer.stop = True  # type: ignore[attr-defined]

    def on_epoch_end(trainer: object) -> None:
        state["epochs"] = int(trainer.epoch) + 1  # type: ignore[attr-defined]
        tloss = trainer.tloss  # type: ignore[attr-defined]
        pairs = tloss.items() if isinstance(tloss, dict) else zip(trainer.loss_names, tloss, strict=False)  # type: ignore[attr-defined]
        state["losses"] = {str(n).replace("_loss", ""): round(float(v), 5) for n, v in pairs}
        print(f"LOOPER_EPOCH epoch={state['epochs']} steps={state['steps']} "
              f"elapsed={time.time() - T_START:.1f} " + " ".join(f"{n}={v:.4f}" for n, v in state["losses"].items()),
              flush=True)

    def on_pretrain_end(trainer: object) -> None:
        PHASES["trainer_setup"] = round(time.time() - T_START, 2)  # loaders, label caches, RAM cache, optimizer
        if not CUDA:  # Ultralytics set cores - 1 threads (1 of 2): the loader's worker is mostly idle here
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()  # macOS: no affinity
            told = int(os.environ.get("LOOPER_THREADS") or 0) or (int(OMP_THREADS) if OMP_THREADS.isdigit() else 0)
            torch.set_num_threads(THREADS or told or cores or 1)
        if not VALIDATE:  # evaluate.py scores the model; Ultralytics' own validation only costs budget
            trainer.validate = lambda: (trainer.metrics, 0.0)  # type: ignore[attr-defined]
            trainer.final_eval = lambda: None  # type: ignore[attr-defined]
        if CLS_PRIOR > 0 and (start is None or TRANSFER):  # class scores start near CLS_PRIOR (~1e-5 else): fewer steps
            bias = math.log(CLS_PRIOR / (1.0 - CLS_PRIOR))
            for net in (trainer.model, getattr(trainer.ema, "ema", None)):  # type: ignore[attr-defined]
                if net is None:
                    continue
                head = net.model[-1]
                for seq in head.cv3:
                    seq[-1].bias.data[: head.nc] = bias

    model.add_callback("on_pretrain_routine_end", on_pretrain_end)
    model.add_callback("on_train_batch_start", on_batch_start)
    model.add_callback("on_train_batch_end", on_batch_end)
    model.add_callback("on_train_epoch_end", on_epoch_end)
    train_seconds = max(5.0, BUDGET - OVERHEAD_SECONDS - (time.time() - T_START))
    data = str(data_yaml())
    PHASES["data_listed"] = round(time.time() - T_START, 2)
    if MAX_STEPS:  # a step budget: epochs and the LR schedule follow from the steps, not the clock
        per_epoch = max(1, math.ceil(LISTED["train"] / BATCH))  # the loader keeps the last short batch
        # Ultralytics plans its LR per whole epoch; on_batch_start lays it over exactly MAX_STEPS instead
        # (its own warm-up is off here: WARMUP_EPOCHS becomes that many epochs' worth of steps)
        schedule = {"epochs": math.ceil(MAX_STEPS / per_epoch), "time": None, "warmup_epochs": 0.0}
        warmup_steps[0] = min(MAX_STEPS - 1, round(WARMUP_EPOCHS * per_epoch))
    else:  # wall clock only: Ultralytics re-plans epochs (and the LR schedule) from the epoch time
        schedule = {"epochs": 1000, "time": train_seconds / 3600.0, "warmup_epochs": WARMUP_EPOCHS}
    model.train(
        data=data, **schedule, patience=0,
        imgsz=IMGSZ, batch=BATCH, nbs=BATCH, optimizer=OPTIMIZER, lr0=LR0, lrf=LRF, momentum=MOMENTUM,
        weight_decay=WEIGHT_DECAY, cos_lr=COS_LR, freeze=FREEZE or None, mosaic=MOSAIC,
        close_mosaic=0, scale=SCALE, translate=TRANSLATE, fliplr=FLIPLR, flipud=FLIPUD,
        hsv_h=0.0, hsv_s=0.0, hsv_v=0.0, box=BOX_GAIN, cls=CLS_GAIN, dfl=DFL_GAIN,
        device=DEVICE if DEVICE != "cuda" else 0, workers=WORKERS, seed=SEED, deterministic=True,
        amp=AMP, plots=False, val=False, project=str(OUT), name="ultralytics", exist_ok=True,
        verbose=False, pretrained=False, cache=cache_mode(), trainer=start_trainer(start),
    )
    weights_dir = OUT / "ultralytics" / "weights"
    src = weights_dir / "last.pt"
    if not src.is_file():
        src = weights_dir / "best.pt"
    if not src.is_file():
        sys.exit(f"train.py: Ultralytics wrote no weights under {weights_dir}")
    save_weights(src, OUT / "weights.pt")
    seconds = time.time() - T_START
    if CUDA:
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    info = {
        "steps": state["steps"], "epochs": state["epochs"], "seconds": round(seconds, 2),
        "peak_memory_mb": round(peak, 1), "final_losses": state["losses"],
        "device": "cuda" if CUDA else DEVICE, "seed": SEED, "budget_seconds": BUDGET, "overhead_seconds": OVERHEAD_SECONDS,
        "max_steps": MAX_STEPS or None, "startup_seconds": state.get("startup"), "startup_phases": PHASES,
        "lr_first": state.get("lr_first"), "lr_last": state.get("lr_last"),  # LR at the first and last step (step budget: as trained; wall clock: before Ultralytics' own warm-up sets it)
        "stopped_by": state["stopped_by"],  # steps | time | epochs
        "pretrained": PRETRAINED or None,
        "threads": None if CUDA else torch.get_num_threads(),  # CPU threads the steps ran on
    }
    (OUT / "train.json").write_text(json.dumps(info, sort_keys=True, indent=1) + "\n")
    loss = sum(state["losses"].values()) if state["losses"] else float("nan")
    print(f"LOOPER_SUMMARY steps={info['steps']} epochs={info['epochs']} seconds={info['seconds']} "
          f"loss={loss:.4f} stopped_by={info['stopped_by']}", flush=True)
    return 0


if __name__ == "__main__":
    assert re.match(r"^[A-Za-z0-9_]+$", MODEL), f"train.py: MODEL must be a plain yaml name, got {MODEL!r}"
    sys.exit(main())
