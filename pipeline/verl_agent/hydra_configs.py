"""The verl stage configs of configs/verl/, composed and checked without a GPU.

A stage file (configs/verl/<system>.yaml, one per trained system of pipeline.systems) is a Hydra
primary config: `defaults: [ppo_trainer, maopd_base, _self_]` with verl's config folder on the
search path, which is how `python -m verl.trainer.main_ppo --config-path configs/verl
--config-name <system>` reads it. Hydra lets a config file add keys that verl does not know, so
`compose_stage` merges the same layers in struct mode on top of verl's composed `ppo_trainer`:
a misspelt key raises InputError naming the file and the key, before any GPU job.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError

from pipeline.errors import InputError
from pipeline.systems import trained_system

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs" / "verl"
VERL_PRIMARY = "ppo_trainer"
_NOT_SETTINGS = ("defaults", "hydra")


def verl_config_dir() -> Path:
    import verl.trainer.config

    return Path(verl.trainer.config.__file__).parent


@functools.lru_cache(maxsize=1)
def _verl_defaults() -> DictConfig:
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(verl_config_dir()), version_base=None):
        return compose(config_name=VERL_PRIMARY)


def verl_defaults() -> DictConfig:
    """verl's own composed `ppo_trainer` config (a fresh copy)."""
    return copy.deepcopy(_verl_defaults())


def stage_file(key: str, config_dir: Path = CONFIG_DIR) -> Path:
    trained_system(key)
    path = Path(config_dir) / f"{key}.yaml"
    if not path.is_file():
        raise InputError(f"{path}: missing verl stage config")
    return path


def _read(path: Path) -> dict:
    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{path}: cannot read the config: {e}") from e
    if not isinstance(body, dict):
        raise InputError(f"{path}: expected a mapping at the top level")
    return body


def layers(path: Path) -> list[tuple[Path, dict]]:
    """The files a stage config is made of, in merge order (its `defaults`, then itself);
    verl's `ppo_trainer` must come first."""
    body = _read(path)
    defaults = body.get("defaults", [])
    if not defaults or defaults[0] != VERL_PRIMARY or defaults[-1] != "_self_":
        raise InputError(f"{path}: defaults must start with {VERL_PRIMARY} and end with _self_, got {defaults}")
    out: list[tuple[Path, dict]] = []
    for name in defaults[1:-1]:
        if not isinstance(name, str):
            raise InputError(f"{path}: defaults: expected names of files in {path.parent}, got {name!r}")
        out += layers_of_fragment(path.parent / f"{name}.yaml")
    return out + [(path, body)]


def layers_of_fragment(path: Path) -> list[tuple[Path, dict]]:
    if not path.is_file():
        raise InputError(f"{path}: missing (named in a defaults list)")
    body = _read(path)
    if "defaults" in body:
        raise InputError(f"{path}: a shared fragment must not have its own defaults")
    return [(path, body)]


def _merge(base: DictConfig, settings: dict, where: str) -> DictConfig:
    try:
        return OmegaConf.merge(base, settings)
    except (ConfigKeyError, ConfigAttributeError) as e:
        raise InputError(f"{where}: {e.full_key or e}: not a key of verl's ppo_trainer config") from None


def compose_stage(key: str, overrides: Sequence[str] = (), config_dir: Path = CONFIG_DIR) -> DictConfig:
    """verl's `ppo_trainer` + the stage's layers + `overrides` ("a.b=value"), all in struct mode."""
    cfg = verl_defaults()
    OmegaConf.set_struct(cfg, True)
    for path, body in layers(stage_file(key, config_dir)):
        cfg = _merge(cfg, {k: v for k, v in body.items() if k not in _NOT_SETTINGS}, str(path))
    if overrides:
        cfg = _merge(cfg, OmegaConf.from_dotlist(list(overrides)), "overrides")
    return cfg


def hydra_compose(key: str, overrides: Sequence[str] = (), config_dir: Path = CONFIG_DIR) -> DictConfig:
    """The stage config exactly as verl's Hydra entry point composes it (no key check)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(config_dir).resolve()), version_base=None):
        return compose(config_name=stage_file(key, config_dir).stem, overrides=list(overrides))
