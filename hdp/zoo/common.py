"""What the zoo and its model builders share (kept apart so the builders need not import the zoo)."""

SEED = 0  # every zoo model's random weights come from this seed


def name_port(port, name: str) -> None:
    """Give an output port the tensor name ``name`` (and a Parameter its friendly name)."""
    port.get_tensor().set_names({name})
    node = port.get_node()
    if node.get_type_name() == "Parameter":
        node.set_friendly_name(name)
