"""Batched multi-agent tasks in torch: cooperative navigation and predator-prey with the Multi Particle
Environments' semantics (``mpe.py``), and a StarCraft-style micromanagement skirmish (``skirmish.py``)."""
