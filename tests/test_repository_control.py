"""The pieces of model control without a server: names, load parameters, `file:`
containment, several repositories and the stamps that tell a changed model."""

from __future__ import annotations

import json
import os
import tempfile

import pytest
from model_control_support import add_sub_config, add_sub_pbtxt, write_model
from naiad.repository.catalog import Catalog, check_model_name, folder_stamp, version_stamp
from naiad.repository.overrides import (
    OverrideError,
    materialize_files,
    parse_config_override,
    remove_materialized,
    split_parameters,
)


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "/etc", "a\\b", ".hidden", "a\0"])
def test_names_that_are_not_one_folder_are_refused(name):
    with pytest.raises(LookupError, match="invalid model name"):
        check_model_name(name)


def test_names_of_one_folder_pass():
    for name in ("add_sub", "my.model-2", "x..y"):
        check_model_name(name)


def test_split_parameters_types():
    config, files = split_parameters({"config": "{}", "file:1/m.py": b"x", "other": 1})
    assert config == "{}" and files == {"1/m.py": b"x"}
    with pytest.raises(OverrideError, match="'config' must be a string"):
        split_parameters({"config": 5})
    with pytest.raises(OverrideError, match="carry the file's bytes"):
        split_parameters({"file:m.py": "text"})


def test_config_override_is_completed_and_checked():
    config = parse_config_override(json.dumps(add_sub_config()), "add_sub")
    assert config.max_batch_size == 64 and config.default_model_filename == "model.py"
    with pytest.raises(OverrideError, match="directory name must equal model name"):
        parse_config_override(json.dumps(add_sub_config("other")), "add_sub")
    with pytest.raises(OverrideError, match="Invalid config override"):
        parse_config_override('{"bogus": 1}', "add_sub")


@pytest.mark.parametrize(
    "path", ["../x.py", "/tmp/x.py", "1/../../x.py", "./x.py", "1//x.py", "", "a\0b"]
)
def test_file_paths_must_stay_inside(path):
    temporary = tempfile.gettempdir()
    before = {n for n in os.listdir(temporary) if n.startswith("naiad-model-")}
    with pytest.raises(OverrideError, match="stay inside the model folder"):
        materialize_files(None, "m", {path: b"x"})
    # The refused request's temporary copy is gone.
    assert {n for n in os.listdir(temporary) if n.startswith("naiad-model-")} == before


def test_a_link_in_the_model_folder_cannot_lead_a_file_outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    model = write_model(tmp_path / "repo", "m", add_sub_pbtxt("m"), "pass\n")
    (model / "link").symlink_to(outside)
    for path in ("link/x.py", "link/new/x.py"):
        with pytest.raises(OverrideError, match="through a link"):
            materialize_files(model, "m", {path: b"x"})
    (model / "1" / "evil.py").symlink_to(outside / "target.py")
    with pytest.raises(OverrideError, match="cannot write the file"):
        materialize_files(model, "m", {"1/evil.py": b"x"})
    assert list(outside.iterdir()) == []


def test_files_are_written_into_a_temporary_copy(tmp_path):
    model = write_model(tmp_path / "repo", "m", add_sub_pbtxt("m"), "original\n")
    copy = materialize_files(model, "m", {"1/model.py": b"sent\n", "2/model.py": b"two\n"})
    try:
        assert copy.name == "m" and copy != model
        assert (copy / "1" / "model.py").read_text() == "sent\n"
        assert (copy / "2" / "model.py").read_text() == "two\n"
        assert (copy / "config.pbtxt").exists()
        assert (model / "1" / "model.py").read_text() == "original\n"  # untouched
    finally:
        remove_materialized(copy)
    assert not copy.parent.exists()


def test_catalog_of_several_repositories(tmp_path):
    write_model(tmp_path / "a", "one", add_sub_pbtxt("one"), "")
    write_model(tmp_path / "a", "both", add_sub_pbtxt("both"), "")
    write_model(tmp_path / "b", "two", add_sub_pbtxt("two"), "")
    write_model(tmp_path / "b", "both", add_sub_pbtxt("both"), "")
    catalog = Catalog([tmp_path / "a", tmp_path / "b"])
    folders, duplicates = catalog.scan()
    assert sorted(folders) == ["one", "two"]
    assert duplicates == {
        "both": "failed to poll model 'both': not unique across all model repositories"
    }
    assert catalog.locate("two") == tmp_path / "b" / "two"
    with pytest.raises(LookupError, match="not unique"):
        catalog.locate("both")
    with pytest.raises(LookupError, match="no model folder 'three'"):
        catalog.locate("three")


def test_stamps_see_changes_of_their_version_only(tmp_path):
    model = write_model(tmp_path, "m", add_sub_pbtxt("m"), "v\n", versions=(1, 2))
    one, two, whole = version_stamp(model, 1), version_stamp(model, 2), folder_stamp(model)
    (model / "2" / "model.py").write_text("changed\n")
    os.utime(model / "2" / "model.py", ns=(1, 1))
    assert version_stamp(model, 1) == one
    assert version_stamp(model, 2) != two
    assert folder_stamp(model) != whole
    (model / "3").mkdir()  # a new version folder changes the model, not version 1
    assert version_stamp(model, 1) == one
    assert folder_stamp(model) != whole
    (model / "config.pbtxt").write_text(add_sub_pbtxt("m", max_batch_size=2))
    assert version_stamp(model, 1) != one
