"""Pure domain logic of parley and the ports it talks to the world through."""
