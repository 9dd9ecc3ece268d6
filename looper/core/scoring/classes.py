"""The 26 HVAC plan-symbol classes of the synthetic data set, pure data.

``CLASSES`` fixes the class order (the YOLO class index is the position in this tuple).
``FREQUENCY`` is each class's relative frequency in generated drawings: the most common
class is drawn 100 times as often as the rarest, so the data set is heavily imbalanced.
``LOOKALIKE_GROUPS`` lists symbols that differ only by a small detail (an arrow, a
diagonal, a letter, a filled corner): the hard confusions a detector must learn.
"""

from __future__ import annotations

CLASSES: tuple[str, ...] = (
    # grilles: a hatched rectangle; the detail says what air it moves
    "supply_grille",
    "return_grille",
    "exhaust_grille",
    # diffusers
    "supply_diffuser",
    "return_diffuser",
    "linear_diffuser",
    "round_diffuser",
    # dampers: a duct segment with a blade; the detail says which damper
    "volume_damper",
    "fire_damper",
    "smoke_damper",
    "motorized_damper",
    "backdraft_damper",
    # sensors and controls: a circle with a letter or a mark
    "thermostat",
    "humidistat",
    "co2_sensor",
    "pressure_sensor",
    "smoke_detector",
    # equipment and duct accessories
    "vav_box",
    "fan_coil_unit",
    "exhaust_fan",
    "unit_heater",
    "access_door",
    "flex_connector",
    "turning_vanes",
    "sound_attenuator",
    "control_valve",
)

FREQUENCY: dict[str, float] = {
    "supply_diffuser": 100.0,
    "return_grille": 60.0,
    "thermostat": 40.0,
    "volume_damper": 35.0,
    "linear_diffuser": 30.0,
    "supply_grille": 25.0,
    "exhaust_grille": 20.0,
    "vav_box": 18.0,
    "return_diffuser": 15.0,
    "fire_damper": 12.0,
    "smoke_detector": 10.0,
    "access_door": 8.0,
    "round_diffuser": 7.0,
    "fan_coil_unit": 6.0,
    "exhaust_fan": 5.0,
    "flex_connector": 5.0,
    "turning_vanes": 4.0,
    "humidistat": 3.5,
    "co2_sensor": 3.0,
    "smoke_damper": 3.0,
    "motorized_damper": 2.5,
    "unit_heater": 2.0,
    "pressure_sensor": 1.5,
    "sound_attenuator": 1.5,
    "backdraft_damper": 1.0,
    "control_valve": 1.0,
}

LOOKALIKE_GROUPS: dict[str, tuple[str, ...]] = {
    "grilles": ("supply_grille", "return_grille", "exhaust_grille"),
    "dampers": ("volume_damper", "fire_damper", "smoke_damper", "motorized_damper", "backdraft_damper"),
    "sensors": ("thermostat", "humidistat", "co2_sensor", "pressure_sensor"),
    "square_diffusers": ("supply_diffuser", "return_diffuser"),
}

CLASS_INDEX: dict[str, int] = {name: i for i, name in enumerate(CLASSES)}

assert len(CLASSES) == 26 and len(set(CLASSES)) == 26, "the class list must hold 26 distinct names"
assert set(FREQUENCY) == set(CLASSES), "every class needs a frequency"
assert all(name in CLASS_INDEX for group in LOOKALIKE_GROUPS.values() for name in group)
