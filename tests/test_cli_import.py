"""``--import FILE.py`` runs exactly the user's file, whatever it is named
(``yaml.py``, ``ray.py``, a package folder named like a standard module), under a private module
name, through the CLI where users met it (an installed ``yaml`` was imported instead, and the
task was then reported as unregistered)."""

from __future__ import annotations

import sys

import pytest

from perm_circuits.cli import main
from perm_circuits.tasks import TASKS
from perm_circuits.tasks.base import file_module_name, import_module_or_file

TASK = '''
from dataclasses import dataclass
from typing import ClassVar

import torch

from perm_circuits import TaskBatch, register_task


@dataclass(frozen=True)
class Copy:
    """``a =`` -> ``a``: the answer is read at the ``=`` token."""

    V: int = 4
    name: ClassVar[str] = "{name}"

    d_vocab = property(lambda self: self.V + 1)
    n_ctx = property(lambda self: 2)
    metric_names = property(lambda self: ("accuracy",))

    def sample(self, n, generator, split="train"):
        a = torch.randint(self.V, (n,), generator=generator)
        tokens = torch.stack([a, torch.full_like(a, self.V)], dim=1)
        targets = torch.zeros_like(tokens)
        targets[:, -1] = a
        mask = torch.zeros(n, 2)
        mask[:, -1] = 1.0
        return TaskBatch(tokens, targets, mask)

    def test_set(self, n=200, seed=1234):
        return self.sample(n, torch.Generator().manual_seed(seed), "test")

    def metrics(self, logits, batch):
        return {{"accuracy": float((logits[:, -1].argmax(-1) == batch.targets[:, -1]).float().mean())}}

    def reference(self, batch):
        return batch.targets

    def to_dict(self):
        return {{"task": self.name, "V": self.V}}

    @classmethod
    def from_dict(cls, data):
        return cls(V=data["V"])


register_task(Copy.name, Copy)
'''


@pytest.fixture
def forget():
    """Forget the modules and tasks a test made (a fresh session afterwards)."""
    made: list[tuple[str, str]] = []
    yield made
    for module, task in made:
        sys.modules.pop(module, None)
        TASKS.pop(task, None)


def test_a_task_file_named_yaml_py_is_the_one_imported(tmp_path, capsys, forget):
    import yaml  # the installed package, already imported as in any session that loaded a config

    from perm_circuits import FitConfig, train
    from perm_circuits.tasks.checkpoint import save_task_model

    path = tmp_path / "yaml.py"
    path.write_text(TASK.format(name="copy_from_yaml_py"))
    forget.append((file_module_name(path), "copy_from_yaml_py"))
    module = import_module_or_file(str(path))
    assert module.__name__ == file_module_name(path) and module.__file__ == str(path)
    assert sys.modules["yaml"] is yaml and TASKS["copy_from_yaml_py"] is module.Copy
    task = module.Copy()
    model = train({"d_model": 16}, task, FitConfig(steps=5, batch_size=32), progress=False).model
    saved = save_task_model(model, tmp_path / "model", task)
    # a fresh session: the CLI runs the file, and the checkpoint's task is then known
    sys.modules.pop(module.__name__)
    TASKS.pop("copy_from_yaml_py")
    assert main(["evaluate", str(saved), "--import", str(path), "--samples", "50", "--json"]) == 0
    assert '"accuracy"' in capsys.readouterr().out
    assert TASKS["copy_from_yaml_py"].__module__ == file_module_name(path) and sys.modules["yaml"] is yaml


def test_ray_py_a_stdlib_named_folder_and_a_bare_name_run_the_users_file(tmp_path, monkeypatch, forget):
    ray_file = tmp_path / "ray.py"
    ray_file.write_text(TASK.format(name="copy_from_ray_py"))
    package = tmp_path / "json"  # a package folder named like the standard json
    package.mkdir()
    (package / "__init__.py").write_text("from .tasks import Copy\n")
    (package / "tasks.py").write_text(TASK.format(name="copy_from_json_folder"))
    forget += [(file_module_name(ray_file), "copy_from_ray_py"), (file_module_name(package), "copy_from_json_folder"),
               (file_module_name(package) + ".tasks", "")]
    had_ray = "ray" in sys.modules
    assert import_module_or_file(str(ray_file)).Copy is TASKS["copy_from_ray_py"]
    assert ("ray" in sys.modules) == had_ray  # the installed Ray was not imported for it
    assert import_module_or_file(str(package)).Copy is TASKS["copy_from_json_folder"]
    assert sys.modules["json"].__file__ != str(package / "__init__.py")
    monkeypatch.chdir(tmp_path)  # --import ray with ./ray.py here: the user's file (once: not run twice)
    assert import_module_or_file("ray") is sys.modules[file_module_name(ray_file)]
    assert import_module_or_file("./json") is sys.modules[file_module_name(package)]
    with pytest.raises(ValueError, match=r"cannot import 'missing/yaml.py': no such .py file or package folder"):
        import_module_or_file("missing/yaml.py")


def test_a_worker_reimports_the_file_under_the_drivers_name(tmp_path, forget):
    """A sweep worker gets ``(module name, file)`` from its driver and loads the file under that name."""
    path = tmp_path / "yaml.py"
    path.write_text(TASK.format(name="copy_in_worker"))
    name = file_module_name(path)
    forget.append((name, "copy_in_worker"))
    module = import_module_or_file(name, str(path))
    assert module.__name__ == name and sys.modules[name] is module and TASKS["copy_in_worker"] is module.Copy
    assert import_module_or_file(name, str(path)) is module
    other = tmp_path / "other.py"
    other.write_text("")
    with pytest.raises(ValueError, match="another module of that name is already imported"):
        import_module_or_file(name, str(other))
