"""A tiny MCP server for the screenshots (stdio, FastMCP): a weather tool that answers from a table."""

from __future__ import annotations

from mcp.server.fastmcp import FastMCP

server = FastMCP("weather")
WEATHER = {"lisbon": "Light rain, 14 °C, wind 20 km/h from the west", "oslo": "Snow, -3 °C, calm"}


@server.tool()
def get_weather(city: str = "Lisbon") -> str:
    """Today's weather in a city."""
    return WEATHER.get(city.strip().lower(), f"Sunny, 21 °C in {city}")


@server.tool()
def convert_temperature(celsius: float) -> float:
    """Degrees Celsius in Fahrenheit."""
    return round(celsius * 9 / 5 + 32, 1)


if __name__ == "__main__":
    server.run("stdio")
